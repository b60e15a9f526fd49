/* device.h: what the simulator knows of one GPU model: capacity, memory outside the caching
 * allocator, and the rates the cost model turns into op times. Filled from the Lua catalog
 * (lua/hw/gpus.lua) by the scenario loader; every figure carries its source there. */
#ifndef VR_DEVICE_H
#define VR_DEVICE_H

#include <stdint.h>

#include "collective.h"
#include "graph.h"

typedef struct DeviceSpec {
    char key[32];                   /* catalog name, e.g. "h200" */
    char name[64];                  /* marketing name */
    uint64_t total_bytes;           /* what torch.cuda.get_device_properties().total_memory says */
    uint64_t context_bytes;         /* CUDA context + cuBLAS/cuDNN handles, outside reserved */
    uint64_t cublas_workspace_bytes;/* per cuBLAS handle, through the caching allocator */
    double peak_flops[DT_COUNT];    /* dense math rate per compute dtype, FLOP/s (0 = unknown) */
    double mem_bw;                  /* HBM/GDDR bandwidth, bytes/s */
    double eff_compute;             /* fraction of peak_flops large GEMMs reach */
    double eff_memory;              /* fraction of mem_bw streaming kernels reach */
    double launch_ns;               /* per-kernel launch + dispatch overhead, ns */
    int sm_count;                   /* streaming multiprocessors (0: unknown, taken as 132) */
    double compute_capability;      /* e.g. 8.6, 9.0 (0: unknown) */
    double price_per_hour;          /* USD per GPU-hour, 0 = unknown */
    /* links, for collectives and offload */
    int world;                      /* data-parallel ranks */
    double coll_bw;                 /* per-GPU bus bandwidth of the collective link, bytes/s */
    double coll_latency_ns;         /* per-step latency of a ring step, ns */
    CollLink coll[COLL_COUNT];      /* per collective, fitted from measured NCCL points (bus_bw 0:
                                       use coll_bw and coll_latency_ns) */
    /* the cluster, for collectives that leave a node (collective.h coll_net_time_ns) */
    int gpus_per_node;              /* GPUs of one NVLink/PCIe domain (0: all in one node) */
    int nics_per_node;              /* network ports per node, rail-optimised */
    double nic_bw;                  /* bytes/s per NIC, one direction, achieved (0: no network) */
    double nic_latency_ns;          /* per ring step across the network */
    int replicate;                  /* HSDP: ranks of a replicate group (one per shard group of
                                       world / replicate consecutive ranks); 0 = no HSDP */
    double host_bw;                 /* host<->device copy bandwidth (pinned), bytes/s */
    double host_latency_ns;
    double cpu_adam_rate;           /* parameters/s the host's CPU Adam updates (DeepSpeed) */
    double cpu_torch_adamw_rate;    /* parameters/s torch.optim.AdamW updates on CPU tensors */
} DeviceSpec;

/* Time in ns of a collective of `bytes` (the full tensor) over n ranks (collective.h): kind is
 * "allreduce", "reduce_scatter", "allgather" or "broadcast"; 0 for n <= 1 or an unknown kind.
 * per_node: how many of the group's ranks share a node, as the mesh places it (0: a block of
 * consecutive ranks, or HSDP's strided replicate group where dev->replicate says so). */
double device_collective_ns(const DeviceSpec *dev, const char *kind, double bytes, int n, int per_node);

/* ATen's staging buffers for a sum over the rows of an m x c tensor (a Linear's grad_bias, a
 * norm weight's gradient; Reduce.cuh's global reduce): when the reduction splits its rows over
 * several blocks, it allocates a buffer of partial sums and a semaphore per output block through
 * the caching allocator. Whether it splits, and into how many blocks, follows the GPU's SM count
 * and threads per SM, so the buffers are worked out per device when an op runs (Op.rowsum).
 * Writes the two sizes (bytes) to out and returns 2, or returns 0 when the sum does not split. */
int device_row_sum_buffers(const DeviceSpec *dev, int64_t m, int64_t c, uint64_t out[2]);

/* Time in ns of one op on dev: roofline max(flops / (peak * e_c), bytes / (bw * e_m)) plus the
 * launch overhead. Ops of kind "none" take no time. */
double device_op_ns(const DeviceSpec *dev, const Op *op);

#endif
