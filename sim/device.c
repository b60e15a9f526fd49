/* device.c: the roofline cost of one op on a DeviceSpec. */
#include "device.h"

#include <string.h>

double device_collective_ns(const DeviceSpec *dev, const char *kind, double bytes, int n) {
    CollKind k;
    if (n <= 1 || coll_kind_parse(kind, &k)) return 0.0;
    CollLink link = dev->coll[k];
    if (!(link.bus_bw > 0)) link = (CollLink){dev->coll_latency_ns, dev->coll_bw};
    /* how the group lies on the nodes: HSDP's replicate all-reduce takes one rank of each shard
     * group (strided), every other collective a block of consecutive ranks */
    int g = dev->gpus_per_node > 0 ? dev->gpus_per_node : n;
    int per_node = n < g ? n : g;
    if (k == COLL_ALLREDUCE && dev->replicate > 1 && n == dev->replicate && n < dev->world) {
        int shard = dev->world / n;
        per_node = shard >= g ? 1 : g / shard;
    }
    int nodes = (n + per_node - 1) / per_node;
    if (nodes <= 1 || !(dev->nic_bw > 0) || dev->nics_per_node <= 0)
        return coll_time_ns(&link, k, bytes, n);
    CollNet net = {.intra = link, .nic_bw = dev->nic_bw, .nic_latency_ns = dev->nic_latency_ns,
                   .nics_per_node = dev->nics_per_node, .gpus_per_node = g, .per_node = per_node,
                   .nodes = nodes};
    return coll_net_time_ns(&net, k, bytes, n);
}

double device_op_ns(const DeviceSpec *dev, const Op *op) {
    if (op->kind_id == OPK_NONE) return 0.0;
    if (op->stream == STREAM_COLLECTIVE || op->stream == STREAM_REDUCE_SCATTER)
        return device_collective_ns(dev, op->kind, op->bytes_moved, op->world);
    if (op->stream == STREAM_H2D || op->stream == STREAM_D2H)
        return dev->host_bw > 0 ? op->bytes_moved / dev->host_bw * 1e9 + dev->host_latency_ns : 0;
    if (op->kind_id == OPK_CPU_ADAM)
        return dev->cpu_adam_rate > 0 ? op->flops / dev->cpu_adam_rate * 1e9 : 0;
    if (op->kind_id == OPK_CPU_ADAMW_TORCH)
        return dev->cpu_torch_adamw_rate > 0 ? op->flops / dev->cpu_torch_adamw_rate * 1e9 : 0;
    double rate = dev->peak_flops[op->compute_dtype];
    if (rate <= 0) rate = dev->peak_flops[DT_FP32];
    double ec = dev->eff_compute > 0 ? dev->eff_compute : 1.0;
    double em = dev->eff_memory > 0 ? dev->eff_memory : 1.0;
    double t_c = rate > 0 ? op->flops / (rate * ec) : 0.0;
    double t_m = dev->mem_bw > 0 ? op->bytes_moved / (dev->mem_bw * em) : 0.0;
    double t = t_c > t_m ? t_c : t_m;
    return t * 1e9 + dev->launch_ns;
}
