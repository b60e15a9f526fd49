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

/* A copy of c that prices ops on dev: its curves, classes and kernel floor and gap are c's, to
 * the bit, and its device dev (what the curves fall back to where they have no point). The caller
 * owns *out. VR_ENOMEM. */
VrStatus cost_clone(const CostModel *c, const DeviceSpec *dev, CostModel **out /* OUT */);

/* ---- a calibrated profile as measured ---------------------------------------------------
 * The tables of lua/hw/calibrated/<gpu>*.lua (their fields: lua/hw/calibrated/README.md) as plain
 * rows; sim/bind/plan_read.c copies them out of Lua, cost_from_profile turns them into curves. Every
 * row of a table that is read becomes a point: a row that cannot (a missing or non-positive
 * figure, a dtype vrsim does not know) is an error naming the table and row, never skipped. */

/* A row of `gemm` (vrsim-calibrate: cublasGemmEx, C[m,n] = op(A[m,k]) op(B[k,n]), `batch` of
 * them): a point of dtype's GEMM curve at 2 m n k batch FLOPs. */
typedef struct CostGemmRow {
    const char *dtype;   /* "fp32", "fp16", "bf16", ... (dtype_parse), or "tf32" (below); borrowed */
    double m, n, k;      /* the problem (elements) */
    double batch;        /* GEMMs per call (1 for a plain GEMM) */
    double tflops;       /* 2 m n k batch / time, 1e12 FLOP/s */
    bool kernel_time;    /* the time is the kernels' own (torch.profiler, measure_gemm_kernels.py);
                            such rows supersede the other rows of their dtype up to the largest
                            of them, where a call timed with events measures its launch */
} CostGemmRow;

/* A row of `copy`, `elementwise` (vrsim-calibrate) or `torch_ops` (measure_torch_ops.py): a
 * streaming kernel that moved gbps * ms bytes at gbps. */
typedef struct CostStreamRow {
    const char *cls;     /* torch_ops: the memory-access class ("broadcast", ...); else NULL; borrowed */
    double ms;           /* time per call */
    double gbps;         /* every byte read and written / time, 1e9 bytes/s */
} CostStreamRow;

/* The fused-attention backends whose times a profile's `sdpa` rows carry (measure_sdpa.py), in
 * the order of CostSdpaRow's arrays; cost_sdpa_backend names each as the profile does. */
enum { COST_SDPA_CUDNN = 0, COST_SDPA_FLASH, COST_SDPA_EFFICIENT, COST_SDPA_FLEX, COST_SDPA_COUNT };

/* A row of `sdpa`: PyTorch's scaled_dot_product_attention on one shape, timed per backend. */
typedef struct CostSdpaRow {
    double batch, heads, seq_q, seq_k, dim;
    bool causal;
    double fwd_ms[COST_SDPA_COUNT];     /* forward alone; 0 = that backend was not timed */
    double fwdbwd_ms[COST_SDPA_COUNT];  /* forward and backward */
    bool kernel_time;      /* the times are the kernels' own device time (torch.profiler,
                              measure_sdpa_kernels.py), not a single call timed with events */
    bool masked;           /* with an additive attention mask (no block skipped) */
} CostSdpaRow;

/* The six GEMMs of a LoRA adapter of rank r on a layer of width d at t tokens (graph.h
 * Op.lora_rank), by the names of a `lora_gemm` row's `gemm`: forward x A^T ("A_fwd") and a B^T
 * ("B_fwd"); backward, each matrix's data and weight gradients. Each is 2 t d r FLOPs. */
enum { COST_LORA_A_FWD = 0, COST_LORA_B_FWD, COST_LORA_A_DGRAD, COST_LORA_A_WGRAD,
       COST_LORA_B_DGRAD, COST_LORA_B_WGRAD, COST_LORA_GEMMS };
#define COST_LORA_RANKS 8 /* distinct ranks one dtype's GEMM may have rows of */

/* A row of `lora_gemm` (measure_lora_gemms.py): one adapter GEMM's kernels' own time. */
typedef struct CostLoraRow {
    const char *dtype;   /* "fp32", "bf16", ...; borrowed */
    const char *gemm;    /* "A_fwd", "B_fwd", "A_dgrad", "A_wgrad", "B_dgrad", "B_wgrad"; borrowed */
    double rank, tokens, width;
    double ms;
} CostLoraRow;

/* A whole profile. Arrays are borrowed for the call; NULL with a count of 0 for a table the
 * profile lacks. */
typedef struct CostProfile {
    const CostGemmRow *gemm;       int n_gemm;       /* the GEMM grid */
    const CostStreamRow *stream;   int n_stream;     /* `copy` then `elementwise`: the generic curve */
    const CostStreamRow *torch_ops; int n_torch_ops; /* PyTorch's kernels by class */
    const CostSdpaRow *sdpa;       int n_sdpa;       /* fused attention per backend */
    const CostLoraRow *lora;       int n_lora;       /* LoRA adapters' GEMMs */
    double launch_device_us;       /* an empty kernel's device time, back to back (0: none) */
    double kernel_gap_us;          /* the stream's gap between back-to-back kernels (0: none) */
} CostProfile;

/* FLOPs of one attention forward as the models count them: 4 b h sq sk d (Q K^T and P V), halved
 * when causal. Its backward counts COST_SDPA_BWD_FLOPS times that (dQ, dK, dV and the
 * recomputed P: five matmuls against the forward's two). */
double cost_sdpa_flops(double batch, double heads, double seq_q, double seq_k, double dim,
                       bool causal);
#define COST_SDPA_BWD_FLOPS 2.5

/* A timed sdpa call shorter than this (ms) is left out of the curves: a single call timed with
 * CUDA events carries its launch (tens of microseconds), so it says more about launch latency
 * than about the kernel. Rows of kernel time (CostSdpaRow.kernel_time) carry no launch and are
 * all read. */
#define COST_SDPA_MIN_TIMED_MS 0.1

/* The profile's name for backend b (COST_SDPA_*): "cudnn", "flash", "efficient", "flex"; the ops
 * it prices are of kind "attention_cudnn", "attention_flash", "attention_mem_efficient",
 * "attention_flex" (FlexAttention's compiled kernels, timed in the same rows). */
const char *cost_sdpa_backend(int b);

/* Builds the model of device dev from a measured profile:
 *   - each GEMM dtype's curve from the `gemm` rows of that dtype (rows of "tf32" are measured
 *     but not read: PyTorch runs fp32 matmuls in full fp32 unless allow_tf32 is set, and vrsim
 *     has no tf32 compute dtype);
 *   - the generic streaming curve from the stream rows; one bandwidth class per torch_ops class
 *     (cost_add_class), from that class's rows;
 *   - per backend, a forward FLOP-rate curve (kind "attention_<backend>") and a backward one
 *     ("..._bwd") from the sdpa rows that timed it (single calls: for at least
 *     COST_SDPA_MIN_TIMED_MS), FLOPs by cost_sdpa_flops, the backward's time being fwdbwd_ms -
 *     fwd_ms. Where kernel-time rows exist, single-call rows are not read, and two kinds of row
 *     make curves of their own: rows whose keys are fewer than their queries (cross-attention:
 *     SDXL's 77 text tokens), "attention_<backend>_cross" and its "_bwd", whose backward
 *     accumulates dK and dV over every query block of a few key blocks and takes several times
 *     what a self-attention of the same FLOPs takes; and masked rows, "attention_<backend>_masked",
 *     whose kernels read the additive mask and skip no block, "attention_<backend>_masked_unaligned"
 *     for those whose keys are not a multiple of 8 (a bf16 mask row not a multiple of 16 bytes:
 *     cuDNN's forward on an H100 runs 2-2.7x its aligned time there, as Hopper's tensor memory
 *     accelerator takes no such stride). An op of a "_cross" or "_masked" kind without such a
 *     curve takes its backend's, one of a "_masked_unaligned" kind the "_masked" curve; flex rows
 *     of head dim 64 or less make "attention_flex_d64" (its Triton kernels reach 0.7x their
 *     head-dim-128 rate at equal FLOPs), which falls back to the plain flex curve;
 *   - per dtype, adapter GEMM (COST_LORA_*) and rank, a FLOP-rate curve from the `lora_gemm` rows
 *     (2 tokens width rank FLOPs over ms): an op with Op.lora_rank takes each of its GEMMs' time
 *     from the curves of its dtype, GEMM and rank, interpolated in log rank between the two
 *     nearest ranks measured, or the GEMM path when its rank lies outside them or its dtype has
 *     none (cuBLAS runs these skinny GEMMs far below the rate of square ones of the same FLOPs:
 *     in fp32, as peft keeps its adapters, on the SIMT cores); never less than its bytes' time
 *     at the streaming curve (on a GPU of less bandwidth than the one measured, their bound);
 *   - the kernel floor and gap (cost_set_kernel_ns, cost_set_kernel_gap_ns).
 * There is no limit on rows. The caller owns *out. VR_EINVAL for a row that cannot be a point
 * (why, if not NULL, gets a line naming the table, the row (1-based) and the figure), VR_ENOMEM. */
VrStatus cost_from_profile(const DeviceSpec *dev, const CostProfile *prof,
                           CostModel **out /* OUT */, char *why /* OUT */, size_t why_n);

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
 *     (a LoRA adapter GEMM takes its own dtype's ratio), or attention[b] for fused-attention
 *     backend b where given (its code reaches another fraction of peak on another architecture);
 *   - a memory-bound kernel reaches the same fraction of the target's DRAM bandwidth at the same
 *     time per byte (Little's law: the same latency with bw times the bytes in flight): sizes and
 *     rates scale by bw; the classes a second GPU measured too are then replaced by rows carried
 *     with their DRAM and SM parts split (lua/hw/carry.lua), through cost_measured_here;
 *   - the per-kernel floor and the stream's gap between kernels stay as measured.
 * A dtype whose ratio is 0 (no hardware path on the target) loses its GEMM curve. */
typedef struct CostCarry {
    double compute[DT_COUNT];  /* target / reference dense peak per dtype, 0 = no path */
    double attention[COST_SDPA_COUNT]; /* the rate ratio of a fused-attention backend's curves in
                                          place of compute[bf16] (whose GEMM rate a sustained
                                          matmul may raise, a cuBLAS figure): the dense peak ratio
                                          times the kernel's fraction of peak on the target's
                                          architecture / on the reference's (lua/hw/carry.lua);
                                          0 = compute[bf16] */
    double sm;                 /* target SMs / reference SMs */
    double bw;                 /* target DRAM bandwidth / reference */
} CostCarry;

/* Replaces c's fused-attention curves with those of n kernel-time sdpa rows (cost_from_profile
 * makes them the same way) measured on another GPU than the one c was built from: the simulated
 * GPU itself (sx = ry = 1), or one of its architecture whose rows are carried to it as
 * cost_carry carries attention, FLOPs times sx (target SMs / measuring GPU's), rates times ry
 * (target dense peak / measuring GPU's). A backend and variant the rows lack keeps its curve.
 * Every row is checked first: VR_EINVAL (why names the row; c unchanged) for a row that is not
 * kernel time or cannot be a point, or for ratios not > 0; VR_ENOMEM. */
VrStatus cost_measured_sdpa(CostModel *c, const CostSdpaRow *rows, int n, double sx, double ry,
                            char *why /* OUT */, size_t why_n);

/* Replaces c's GEMM curve of each dtype that n gemm rows (as a profile's) have, measured on
 * another GPU than the one c was built from: the simulated GPU itself (sx = ry = 1), or one of
 * its architecture, carried as cost_carry carries a GEMM curve (FLOPs times sx, the SM ratio;
 * rates times ry, the dense peak ratio of that dtype). Rows not of kernel time shorter than
 * COST_SDPA_MIN_TIMED_MS are left out (a single call timed with events carries its launch), and
 * below the smallest problem read, that dtype's GEMMs run at the roofline (peak x eff_compute),
 * not at the smallest row's time. A dtype the rows lack keeps its curve. VR_EINVAL (why names
 * the row; c unchanged) for a row that cannot be a point or ratios not > 0; VR_ENOMEM. */
VrStatus cost_measured_gemm(CostModel *c, const CostGemmRow *rows, int n, double sx, double ry,
                            char *why /* OUT */, size_t why_n);

/* Carries c (built from the reference's measurements) to the target device `target` as above;
 * afterwards c prices ops on the target. VR_EINVAL for a non-positive sm or bw ratio (c is then
 * unchanged), VR_ENOMEM. */
VrStatus cost_carry(CostModel *c, const DeviceSpec *target, const CostCarry *k);

/* The simulated GPU's own measurements of its memory-bound kernels, over a model carried to it
 * from the reference (lua/hw/calibrated/<gpu>_torch_ops.lua and its supplements, made by
 * validation/harness/run_gpu_classes.sh): each torch_ops class of `own` replaces the carried
 * class of that name (the others stay carried), its copy/elementwise rows, if any, replace the
 * generic streaming curve, and its kernel_gap_us, if above 0, the stream's gap. A kernel that
 * reaches a quarter of DRAM's bandwidth is limited by the loads its SMs keep in flight, so the
 * DRAM ratio the carry applies is a bound, not a measurement (docs/step-time.md). Only `stream`,
 * `torch_ops` and `kernel_gap_us` of own are read. The same call puts the classes carried split
 * into DRAM and SM parts (device.carry.torch_ops) in place of their DRAM-ratio carry. VR_EINVAL for
 * a bad row (why names it), VR_ENOMEM. */
VrStatus cost_measured_here(CostModel *c, const CostProfile *own, char *why /* OUT */, size_t why_n);

/* ---- a mixture of experts' grouped GEMMs and dispatch, measured on the GPU itself ---------
 * lua/hw/calibrated/<gpu>_grouped_mm.lua (validation/harness/measure_grouped_mm.py): the time of
 * torch._grouped_mm and of the index ops transformers' grouped_mm experts path runs, on the very
 * GPU simulated. It is never carried to another GPU: a plan reads it only where hardware.lua finds
 * the simulated GPU's own file, and it is applied after the reference profile's carry. */

/* The grouped GEMMs of a `grouped_mm` row's `gemm`: forward x W_e, the input's gradient
 * grad W_e^T, the weight's x_e^T grad ("bwd", both gradients by autograd, is a cross-check, not
 * read). */
enum { COST_GMM_FWD = 0, COST_GMM_DGRAD, COST_GMM_WGRAD, COST_GMM_COUNT };

/* A row of `grouped_mm`: one grouped GEMM of `rows` token-expert pairs over `experts` experts,
 * each (k -> n), timed per call. */
typedef struct CostGroupedRow {
    const char *gemm;    /* "fwd", "dgrad", "wgrad" or "bwd"; borrowed */
    const char *layout;  /* "nt": weights (E, n, k) passed transposed; "nn": (E, k, n); borrowed */
    const char *routing; /* "balanced" (rows / experts each: read) or "record:<name>" (a measured
                            run's routing: a record, not read); borrowed */
    double experts, rows, n, k;
    double ms;
} CostGroupedRow;

/* The dispatch's index ops (Op.moe_index), by the names of a `moe_index` row's `op`. A gather's
 * rows whose source has fewer rows than it gathers (indices that repeat) are COST_MOE_GATHER_DUP
 * and their backward COST_MOE_GATHER_DUP_BWD. */
enum { COST_MOE_NONE = 0, COST_MOE_SORT, COST_MOE_HISTC, COST_MOE_CUMSUM, COST_MOE_INDEX_PUT,
       COST_MOE_GATHER, COST_MOE_GATHER_BWD, COST_MOE_GATHER_DUP, COST_MOE_GATHER_DUP_BWD,
       COST_MOE_COUNT };

/* A row of `moe_index`: op "sort", "histc", "cumsum", "index_put" (length n), or "index_fwd" /
 * "index_bwd" (n rows of width elements gathered from src_rows rows, and IndexBackward0). */
typedef struct CostMoeIndexRow {
    const char *op;      /* borrowed */
    double n, src_rows, width;
    double ms;
} CostMoeIndexRow;

/* Makes c price grouped GEMMs and the dispatch's index ops from these rows (replacing any it
 * had): per (gemm, layout, experts, n, k), a curve of its balanced rows' pairs per second over
 * the pairs; per index op, a curve of elements per second over its size (moe_size). An op whose
 * shape has a curve takes the curve's time at its size (below the smallest size measured, that
 * size's time; above the largest, its rate): the kernels' own time with the stream's gaps, as
 * the events measured it. VR_EINVAL for a row that cannot be a point (why names the table and
 * row), VR_ENOMEM. */
VrStatus cost_set_moe(CostModel *c, const CostGroupedRow *gmm, int n_gmm, const CostMoeIndexRow *ix,
                      int n_ix, char *why /* OUT */, size_t why_n);

/* Device time of op in ns (0 for ops of kind "none"); collectives and copies go to
 * device_op_ns's link model. */
double cost_op_ns(const CostModel *c, const Op *op);

/* The GEMM rate the curve gives at `flops` for dtype d (FLOP/s), for reports and tests. */
double cost_gemm_rate(const CostModel *c, DType d, double flops);
/* The streaming bandwidth at `bytes` (bytes/s). */
double cost_mem_rate(const CostModel *c, double bytes);

#endif
