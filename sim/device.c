/* device.c: the roofline cost of one op on a DeviceSpec. */
#include "device.h"

#include <stdbool.h>
#include <string.h>

double device_collective_ns(const DeviceSpec *dev, const char *kind, double bytes, int n, int placed) {
    CollKind k;
    if (n <= 1 || coll_kind_parse(kind, &k)) return 0.0;
    CollLink link = dev->coll[k];
    if (!(link.bus_bw > 0)) link = (CollLink){dev->coll_latency_ns, dev->coll_bw};
    /* how the group lies on the nodes: as the mesh placed it where the op says (a data-parallel
     * group that tensor parallelism strides across nodes); else HSDP's replicate all-reduce takes
     * one rank of each shard group (strided), every other collective a block of consecutive ranks */
    int g = dev->gpus_per_node > 0 ? dev->gpus_per_node : n;
    int per_node = n < g ? n : g;
    if (placed > 0) {
        per_node = placed < per_node ? placed : per_node;
    } else if (k == COLL_ALLREDUCE && dev->replicate > 1 && n == dev->replicate && n < dev->world) {
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

static int64_t last_pow2(int64_t n) {
    int64_t p = 1;
    while (p * 2 <= n) p *= 2;
    return p;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Reduce.cuh's ReduceConfig for a sum over dim 0 of a contiguous m x c tensor (the output's c
 * elements vectorised by 4 or 2 where c allows): block shape, whether the rows split across
 * blocks (values per thread above 256 and few enough output blocks to fill the GPU), and then
 * the blocks per output column (ctas_per_output). Checked against the traces: (4096, 640) ->
 * 20 MiB + 20 B, (4096, 5120) -> 132.5 MiB + 160 B, (1024, 10240) -> 80 MiB (SDXL); (4096, 4096)
 * -> 128 MiB + 128 B (fulltrace_held-eager-ckpt-b2), (8192, 4096) -> 132 MiB + 128 B
 * (optrace_pub-c04), all on an H200 (132 SMs); tests/ops/test_rules.lua checks them. */
int device_row_sum_buffers(const DeviceSpec *dev, int64_t m, int64_t c, uint64_t out[2]) {
    if (m <= 0 || c <= 0) return 0;
    int64_t vec = c % 4 == 0 ? 4 : c % 2 == 0 ? 2 : 1;
    int64_t max_threads = 512 / vec;
    int64_t dim0 = c / vec, dim1 = m;
    int64_t d0 = dim0 < max_threads ? last_pow2(dim0) : max_threads;
    int64_t d1 = dim1 < max_threads ? last_pow2(dim1) : max_threads;
    int64_t bw = min64(d0, 32);
    int64_t bh = min64(d1, max_threads / bw);
    bw = min64(d0, max_threads / bh);
    int64_t step_out = bw, step_in = 1;
    bool split = m >= min64(bh * 16, 256);
    if (split) step_in = bh;
    else step_out *= bh;
    /* ceil(m / step_in) as (m - 1) / step_in + 1: m + step_in - 1 overflows near INT64_MAX */
    int64_t vpt = (m - 1) / step_in + 1;
    int64_t grid = (dim0 - 1) / step_out + 1;
    int64_t sms = dev && dev->sm_count > 0 ? dev->sm_count : 132;
    double cc = dev ? dev->compute_capability : 0;
    /* cudaDeviceProp.maxThreadsPerMultiProcessor by compute capability (CUDA C++ Programming
     * Guide, technical specifications): 1024 on 7.5, 1536 on 8.6, 8.9 and 12.x, 2048 else */
    int64_t threads_per_sm = cc == 7.5 ? 1024 : (cc == 8.6 || cc == 8.9 || (cc >= 12 && cc < 13)) ? 1536 : 2048;
    int64_t target = sms * (threads_per_sm / (bw * bh));
    if (!(split && vpt >= 256 && grid <= target)) return 0;
    int64_t c1 = (target + grid - 1) / grid, c2 = (vpt - 1) / 16 + 1, c3 = (vpt - 1) / 256 + 1;
    int64_t ctas = min64(c1, c2);
    if (c3 > ctas) ctas = c3;
    if (ctas <= 1) return 0;
    /* bytes of a tensor no GPU holds saturate at INT64_MAX (the allocator refuses it; Lua's
     * integers hold it) rather than wrap to a small size */
    uint64_t b = 4;
    if (__builtin_mul_overflow(b, (uint64_t)c, &b) || __builtin_mul_overflow(b, (uint64_t)ctas, &b) ||
        __builtin_mul_overflow(b, (uint64_t)(bw * vec), &b) || b > INT64_MAX)
        b = INT64_MAX;
    out[0] = b;
    out[1] = 4 * (uint64_t)grid;
    return 2;
}

double device_op_ns(const DeviceSpec *dev, const Op *op) {
    if (op->kind_id == OPK_NONE) return 0.0;
    /* a collective is priced by its kind and group wherever it runs: on a communication stream
     * (data parallelism's, overlapped) or on the compute stream (tensor parallelism's, which the
     * next kernel waits for; there a group of one is a kernel: "broadcast" also names the
     * memory-bound broadcasting kernels) */
    if (op->stream == STREAM_COLLECTIVE || op->stream == STREAM_REDUCE_SCATTER || op->stream == STREAM_SYMM_MEM ||
        (op->kind_id == OPK_COLLECTIVE && op->world > 1))
        return device_collective_ns(dev, op->kind, op->bytes_moved, op->world, op->per_node);
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
