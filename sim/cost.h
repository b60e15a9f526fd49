/* cost.h: op time from a calibrated profile of the GPU (lua/hw/calibrated/<gpu>*.lua).
 *
 * A CostModel turns measured points into efficiency curves, interpolated with GSL over the log of
 * the problem size: GEMM throughput per dtype against FLOPs, fused attention's throughput per
 * backend against FLOPs, and streaming bandwidth (per memory-access class) against bytes moved.
 * Op time = roofline max(flops / rate(flops), bytes / bw(bytes)), rates from the curves (clamped
 * at their ends), plus the stream's measured gap after each kernel the op launches, and never
 * less than an empty kernel per launch. Launch and dispatch cost is the host's (engine). Without
 * a profile the device's stated efficiencies are used (device_op_ns). */
#ifndef VR_COST_H
#define VR_COST_H

#include "device.h"
#include "graph.h"

typedef struct CostModel CostModel;

/* One measured point: a problem size (FLOPs for GEMMs, bytes moved for streaming) and what the
 * GPU reached (FLOP/s or bytes/s). */
typedef struct CostPoint {
    double size;
    double rate;
} CostPoint;

/* Builds the model from points: gemm[d] for each compute dtype d (may be empty), mem for
 * streaming kernels. Points need not be sorted; equal sizes are averaged. The caller owns *out.
 * VR_EINVAL when a curve has a non-positive size or rate. */
VrStatus cost_new(const DeviceSpec *dev, const CostPoint *const gemm[DT_COUNT],
                  const int n_gemm[DT_COUNT], const CostPoint *mem, int n_mem,
                  CostModel **out /* OUT */);
void cost_free(CostModel *c); /* NULL is a no-op */

/* Adds (or replaces) the bandwidth curve of a memory-access class: ops whose kind names the class
 * ("broadcast", "cast_up", "transpose", ...) take their bandwidth from it; kind "elementwise" is
 * the class "contiguous". VR_EINVAL when the table is full or a point is bad. */
VrStatus cost_add_class(CostModel *c, const char *name, const CostPoint *pts, int n);

/* Adds (or replaces) a FLOP-rate curve (points: FLOPs, FLOP/s) for ops of kind `name` (a fused
 * attention backend, "attention_cudnn"); "<name>_bwd" is the curve of their derived backward.
 * Such an op at least as large as the curve's smallest point takes flops / rate; a smaller one,
 * or a kind without a curve, takes the GEMM path. VR_EINVAL when the table is full or a point is
 * bad. */
VrStatus cost_add_flops_class(CostModel *c, const char *name, const CostPoint *pts, int n);

/* The device time of an empty kernel (launch_device_us of the profile): every kernel takes at
 * least that long on the device. */
void cost_set_kernel_ns(CostModel *c, double ns);
/* The dead time between two kernels back to back in one stream (kernel_gap_us, measured by
 * validation/harness/measure_kernel_gap.py): added once per kernel an op launches. */
void cost_set_kernel_gap_ns(CostModel *c, double ns);

/* How a profile measured on one GPU (the reference) is carried to another (the target), figure by
 * figure (docs/step-time.md):
 *   - a GEMM or fused-attention kernel reaches on the target the fraction of the target's peak that
 *     it reached of the reference's, at the same work per SM (the same number of tile waves): the
 *     curve's sizes scale by sm, its rates by compute[d] (target / reference dense peak of dtype d,
 *     each at the clock its GEMMs hold inside a training step); fused attention takes bf16's ratio;
 *   - a memory-bound kernel reaches the same fraction of the target's DRAM bandwidth at the same
 *     time per byte (Little's law: the same latency with bw times the bytes in flight): sizes and
 *     rates scale by bw;
 *   - the per-kernel floor and the stream's gap between kernels stay as measured.
 * A dtype whose ratio is 0 (no hardware path on the target) loses its GEMM curve. */
typedef struct CostCarry {
    double compute[DT_COUNT];  /* target / reference dense peak per dtype, 0 = no path */
    double sm;                 /* target SMs / reference SMs */
    double bw;                 /* target DRAM bandwidth / reference */
} CostCarry;

/* Carries c (built from the reference's measurements) to the target device `target` as above;
 * afterwards c prices ops on the target. VR_EINVAL for a non-positive sm or bw ratio (c is then
 * unchanged), VR_ENOMEM. */
VrStatus cost_carry(CostModel *c, const DeviceSpec *target, const CostCarry *k);

/* Device time of op in ns (0 for ops of kind "none"); collectives and copies go to
 * device_op_ns's link model. */
double cost_op_ns(const CostModel *c, const Op *op);

/* The GEMM rate the curve gives at `flops` for dtype d (FLOP/s), for reports and tests. */
double cost_gemm_rate(const CostModel *c, DType d, double flops);
/* The streaming bandwidth at `bytes` (bytes/s). */
double cost_mem_rate(const CostModel *c, double bytes);

#endif
