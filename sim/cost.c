/* cost.c: calibrated op costs (see cost.h). Curves are piecewise linear in log(size), built once
 * per plan with gsl_interp and evaluated with an accelerator per curve. */
#include "cost.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include <gsl/gsl_interp.h>
#include <gsl/gsl_errno.h>

typedef struct Curve {
    int n;
    double *x, *y;          /* log(size), rate */
    gsl_interp *interp;     /* NULL when n < 2 */
} Curve;

#define COST_CLASSES 64

struct CostModel {
    DeviceSpec dev;
    char class_name[COST_CLASSES][48]; /* memory-access classes measured through PyTorch */
    uint32_t class_hash[COST_CLASSES];  /* name_hash of each class name: every op's cost looks
                                         * its kind up, so names are compared only on a match */
    Curve cls[COST_CLASSES];
    bool cls_by_flops[COST_CLASSES];   /* a FLOP-rate curve (fused attention), not bandwidth */
    int n_classes;
    double kernel_ns;       /* device time of an empty kernel back to back (per kernel floor) */
    double gap_ns;          /* dead time between back-to-back kernels, beyond their own time */
    Curve gemm[DT_COUNT];
    /* a curve of single calls timed with events (cost_measured_gemm): below its smallest
     * problem, the launch those calls carry would be read as kernel time, so the roofline */
    bool gemm_roofline_below[DT_COUNT];
    Curve mem;
    /* LoRA adapter GEMMs: per dtype and GEMM (COST_LORA_*), the ranks measured, ascending, each
     * with its FLOP-rate curve */
    struct LoraCurves {
        int n;
        double rank[COST_LORA_RANKS];
        Curve rate[COST_LORA_RANKS];
    } lora[DT_COUNT][COST_LORA_GEMMS];
    /* a mixture of experts' grouped GEMMs, measured on this GPU (cost_set_moe): per shape, the
     * token-expert pairs per second over the pairs */
    struct GmmCurve {
        int gemm;                   /* COST_GMM_* */
        bool nn;                    /* weights stored (E, k, n) */
        double experts, n, k;
        Curve rate;
    } *gmm;                         /* n_gmm of them, owned */
    int n_gmm;
    Curve moe[COST_MOE_COUNT];      /* the dispatch's index ops: elements per second over elements */
};

static int cmp_point(const void *a, const void *b) {
    const CostPoint *x = a, *y = b;
    return (x->size > y->size) - (x->size < y->size);
}

/* Sorts, merges equal sizes (mean rate) and builds the interpolation. */
static VrStatus curve_init(Curve *c, const CostPoint *pts, int n) {
    memset(c, 0, sizeof *c);
    if (n <= 0) return VR_OK;
    CostPoint *s = malloc(sizeof *s * (size_t)n);
    c->x = malloc(sizeof(double) * (size_t)n);
    c->y = malloc(sizeof(double) * (size_t)n);
    if (!s || !c->x || !c->y) { free(s); return VR_ENOMEM; }
    memcpy(s, pts, sizeof *s * (size_t)n);
    for (int i = 0; i < n; i++)
        if (!(s[i].size > 0) || !(s[i].rate > 0)) { free(s); return VR_EINVAL; }
    qsort(s, (size_t)n, sizeof *s, cmp_point);
    int m = 0;
    for (int i = 0; i < n;) {
        int j = i;
        double sum = 0;
        while (j < n && s[j].size == s[i].size) sum += s[j++].rate;
        c->x[m] = log(s[i].size);
        c->y[m] = sum / (j - i);
        m++;
        i = j;
    }
    free(s);
    c->n = m;
    if (m >= 2) {
        c->interp = gsl_interp_alloc(gsl_interp_linear, (size_t)m);
        if (!c->interp) return VR_ENOMEM;
        if (gsl_interp_init(c->interp, c->x, c->y, (size_t)m) != GSL_SUCCESS) return VR_EINVAL;
    }
    return VR_OK;
}

static void curve_free(Curve *c) {
    if (c->interp) gsl_interp_free(c->interp);
    free(c->x);
    free(c->y);
}

/* Rate at size, clamped to the measured range; 0 if the curve is empty. */
static double curve_eval(const Curve *c, double size) {
    if (c->n == 0 || !(size > 0)) return 0;
    if (c->n == 1) return c->y[0];
    double x = log(size);
    /* below the smallest measured problem the time stays that problem's: latency-bound */
    if (x <= c->x[0]) return c->y[0] * size / exp(c->x[0]);
    if (x >= c->x[c->n - 1]) return c->y[c->n - 1];
    double y;
    if (gsl_interp_eval_e(c->interp, c->x, c->y, x, NULL, &y) != GSL_SUCCESS) return c->y[0];
    return y;
}

VrStatus cost_new(const DeviceSpec *dev, const CostPoint *const gemm[DT_COUNT],
                  const int n_gemm[DT_COUNT], const CostPoint *mem, int n_mem, CostModel **out) {
    *out = NULL;
    CostModel *c = calloc(1, sizeof *c);
    if (!c) return VR_ENOMEM;
    c->dev = *dev;
    VrStatus st = VR_OK;
    for (int d = 0; d < DT_COUNT && !st; d++) st = curve_init(&c->gemm[d], gemm[d], n_gemm[d]);
    if (!st) st = curve_init(&c->mem, mem, n_mem);
    if (st) { cost_free(c); return st; }
    *out = c;
    return VR_OK;
}

static VrStatus curve_copy(Curve *to, const Curve *from) {
    memset(to, 0, sizeof *to);
    if (from->n == 0) return VR_OK;
    to->x = malloc(sizeof(double) * (size_t)from->n);
    to->y = malloc(sizeof(double) * (size_t)from->n);
    if (!to->x || !to->y) return VR_ENOMEM;
    memcpy(to->x, from->x, sizeof(double) * (size_t)from->n);
    memcpy(to->y, from->y, sizeof(double) * (size_t)from->n);
    to->n = from->n;
    if (from->interp) {
        to->interp = gsl_interp_alloc(gsl_interp_linear, (size_t)to->n);
        if (!to->interp) return VR_ENOMEM;
        if (gsl_interp_init(to->interp, to->x, to->y, (size_t)to->n) != GSL_SUCCESS) return VR_EINVAL;
    }
    return VR_OK;
}

VrStatus cost_clone(const CostModel *c, const DeviceSpec *dev, CostModel **out) {
    *out = NULL;
    CostModel *k = malloc(sizeof *k);
    if (!k) return VR_ENOMEM;
    /* the scalars and names as they are; every curve then its own arrays (zeroed first, so that
     * cost_free frees only what was copied if a copy fails) */
    memcpy(k, c, sizeof *k);
    for (int i = 0; i < COST_CLASSES; i++) memset(&k->cls[i], 0, sizeof k->cls[i]);
    for (int d = 0; d < DT_COUNT; d++) {
        memset(&k->gemm[d], 0, sizeof k->gemm[d]);
        for (int g = 0; g < COST_LORA_GEMMS; g++)
            for (int r = 0; r < COST_LORA_RANKS; r++) memset(&k->lora[d][g].rate[r], 0, sizeof(Curve));
    }
    memset(&k->mem, 0, sizeof k->mem);
    memset(k->moe, 0, sizeof k->moe);
    k->gmm = NULL;
    k->n_gmm = 0;
    k->dev = *dev;
    VrStatus st = curve_copy(&k->mem, &c->mem);
    for (int i = 0; i < COST_MOE_COUNT && !st; i++) st = curve_copy(&k->moe[i], &c->moe[i]);
    if (!st && c->n_gmm > 0) {
        k->gmm = calloc((size_t)c->n_gmm, sizeof *k->gmm);
        if (!k->gmm) st = VR_ENOMEM;
        for (int i = 0; i < c->n_gmm && !st; i++) {
            k->gmm[i] = c->gmm[i];
            memset(&k->gmm[i].rate, 0, sizeof(Curve));
            k->n_gmm = i + 1;
            st = curve_copy(&k->gmm[i].rate, &c->gmm[i].rate);
        }
    }
    for (int i = 0; i < c->n_classes && !st; i++) st = curve_copy(&k->cls[i], &c->cls[i]);
    for (int d = 0; d < DT_COUNT && !st; d++) {
        st = curve_copy(&k->gemm[d], &c->gemm[d]);
        for (int g = 0; g < COST_LORA_GEMMS && !st; g++)
            for (int r = 0; r < c->lora[d][g].n && !st; r++)
                st = curve_copy(&k->lora[d][g].rate[r], &c->lora[d][g].rate[r]);
    }
    if (st) { cost_free(k); return st; }
    *out = k;
    return VR_OK;
}

/* FNV-1a of a class or kind name */
static uint32_t name_hash(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static VrStatus add_class(CostModel *c, const char *name, const CostPoint *pts, int n,
                          bool by_flops) {
    int i;
    uint32_t h = name_hash(name);
    for (i = 0; i < c->n_classes; i++)
        if (c->class_hash[i] == h && strcmp(c->class_name[i], name) == 0) break;
    if (i == c->n_classes) {
        if (c->n_classes == COST_CLASSES || strlen(name) >= sizeof c->class_name[0]) return VR_EINVAL;
        c->n_classes++;
    } else {
        curve_free(&c->cls[i]);
    }
    snprintf(c->class_name[i], sizeof c->class_name[i], "%s", name);
    c->class_hash[i] = name_hash(c->class_name[i]);
    c->cls_by_flops[i] = by_flops;
    return curve_init(&c->cls[i], pts, n);
}

VrStatus cost_add_class(CostModel *c, const char *name, const CostPoint *pts, int n) {
    return add_class(c, name, pts, n, false);
}

VrStatus cost_add_flops_class(CostModel *c, const char *name, const CostPoint *pts, int n) {
    return add_class(c, name, pts, n, true);
}

/* Which curves an sdpa row belongs to (cost.h): plain self-attention, fewer keys than queries,
 * an additive mask, an additive mask whose rows are not a multiple of 16 bytes (the tables are
 * bf16: keys not a multiple of 8), or flex attention at a head dim of 64 or less; single-call
 * rows are all plain. */
typedef enum SdpaVariant {
    SDPA_SELF = 0, SDPA_CROSS, SDPA_MASKED, SDPA_MASKED_UNALIGNED, SDPA_FLEX_D64, SDPA_VARIANTS
} SdpaVariant;
static const char *const SDPA_SUFFIX[SDPA_VARIANTS] = {"", "_cross", "_masked", "_masked_unaligned", "_d64"};
/* A kind without curves of its own takes the next one's: unaligned masked -> masked -> the
 * backend's plain curves; cross -> plain. */
static const struct { const char *suffix, *instead; } SDPA_FALLBACK[] = {
    {"_masked_unaligned", "_masked"}, {"_masked", ""}, {"_cross", ""}, {"_d64", ""}};

/* The FLOP-rate curve of a fused-attention kind ("attention_cudnn"; its backward's is
 * "attention_cudnn_bwd"), or NULL; a variant's kind without curves of its own takes the one
 * SDPA_FALLBACK names ("attention_cudnn_cross" -> "attention_cudnn"). */
static const Curve *flops_curve(const CostModel *c, const char *kind, bool backward) {
    char name[sizeof c->class_name[0]];
    if (!kind || snprintf(name, sizeof name, "%s%s", kind, backward ? "_bwd" : "") >= (int)sizeof name)
        return NULL;
    uint32_t h = name_hash(name);
    for (int i = 0; i < c->n_classes; i++)
        if (c->class_hash[i] == h && c->cls_by_flops[i] && strcmp(c->class_name[i], name) == 0)
            return &c->cls[i];
    size_t n = strlen(kind);
    for (size_t v = 0; v < sizeof SDPA_FALLBACK / sizeof SDPA_FALLBACK[0]; v++) {
        size_t m = strlen(SDPA_FALLBACK[v].suffix);
        if (n > m && strcmp(kind + n - m, SDPA_FALLBACK[v].suffix) == 0) {
            char base[sizeof c->class_name[0]];
            snprintf(base, sizeof base, "%.*s%s", (int)(n - m), kind, SDPA_FALLBACK[v].instead);
            return flops_curve(c, base, backward);
        }
    }
    return NULL;
}

static const Curve *class_curve(const CostModel *c, const char *kind) {
    if (!kind) return NULL;
    /* generic elementwise kernels are the contiguous class */
    const char *k = strcmp(kind, "elementwise") == 0 ? "contiguous" : kind;
    uint32_t h = name_hash(k);
    for (int i = 0; i < c->n_classes; i++)
        if (c->class_hash[i] == h && !c->cls_by_flops[i] && strcmp(c->class_name[i], k) == 0)
            return &c->cls[i];
    /* a dtype-specific class ("foreach_fp32", "transpose_fp8") a profile did not measure: its
     * generic one */
    size_t n = strlen(k);
    static const char *const DTYPE_SUFFIX[] = {"_fp32", "_fp8"};
    for (size_t d = 0; d < sizeof DTYPE_SUFFIX / sizeof DTYPE_SUFFIX[0]; d++) {
        size_t m = strlen(DTYPE_SUFFIX[d]);
        if (n <= m || strcmp(k + n - m, DTYPE_SUFFIX[d]) != 0) continue;
        for (int i = 0; i < c->n_classes; i++)
            if (!c->cls_by_flops[i] && strlen(c->class_name[i]) == n - m &&
                strncmp(c->class_name[i], k, n - m) == 0)
                return &c->cls[i];
    }
    /* a class a profile did not measure, priced by the measured class of the same kernel:
     * a bf16 + fp32 add (peft's LoRA sum) runs the unrolled LoadWithCast kernel of a bf16-to-fp32
     * cast (Loops.cuh), measured as class cast_up on every profile */
    static const char *const FALLBACK[][2] = {{"add_mixed", "cast_up"}};
    for (size_t f = 0; f < sizeof FALLBACK / sizeof FALLBACK[0]; f++)
        if (strcmp(k, FALLBACK[f][0]) == 0) return class_curve(c, FALLBACK[f][1]);
    return NULL;
}

void cost_free(CostModel *c) {
    if (!c) return;
    for (int d = 0; d < DT_COUNT; d++)
        for (int g = 0; g < COST_LORA_GEMMS; g++)
            for (int i = 0; i < c->lora[d][g].n; i++) curve_free(&c->lora[d][g].rate[i]);
    for (int i = 0; i < c->n_classes; i++) curve_free(&c->cls[i]);
    for (int d = 0; d < DT_COUNT; d++) curve_free(&c->gemm[d]);
    curve_free(&c->mem);
    for (int i = 0; i < c->n_gmm; i++) curve_free(&c->gmm[i].rate);
    free(c->gmm);
    for (int i = 0; i < COST_MOE_COUNT; i++) curve_free(&c->moe[i]);
    free(c);
}

double cost_gemm_rate(const CostModel *c, DType d, double flops) {
    double r = curve_eval(&c->gemm[d], flops);
    if (r > 0 && !(c->gemm_roofline_below[d] && log(flops) < c->gemm[d].x[0])) return r;
    double peak = c->dev.peak_flops[d] > 0 ? c->dev.peak_flops[d] : c->dev.peak_flops[DT_FP32];
    return peak * (c->dev.eff_compute > 0 ? c->dev.eff_compute : 1);
}

double cost_mem_rate(const CostModel *c, double bytes) {
    double r = curve_eval(&c->mem, bytes);
    if (r > 0) return r;
    return c->dev.mem_bw * (c->dev.eff_memory > 0 ? c->dev.eff_memory : 1);
}

/* cuDNN's layout transforms around a convolution on NCHW tensors (its tensor-core engines work
 * in NHWC): memory-bound kernels of their own, before and after the convolution's, at the rates
 * of the profile's "layout" (activations) and "layout_filter" (a filter's KCRS <-> KRSC) classes;
 * nothing where the profile has no such class */
static double layout_ns(const CostModel *c, const Op *op) {
    static const char *const CLASS[2] = {"layout", "layout_filter"};
    double t = 0;
    for (int k = 0; k < 2; k++) {
        if (!(op->layout_bytes[k] > 0)) continue;
        const Curve *cc = class_curve(c, CLASS[k]);
        double bw = cc && cc->n ? curve_eval(cc, op->layout_bytes[k]) : 0;
        if (bw > 0) t += op->layout_bytes[k] / bw * 1e9;
    }
    return t;
}

/* A statistics kernel with one block per row (GroupNorm's RowwiseMomentsCUDAKernel,
 * aten/src/ATen/native/cuda/group_norm_kernel.cu): as many rows as the card holds blocks run at
 * once, each at one block's rate through its row, which the profile's class "rowwise" gives by
 * the whole tensor's bytes (L2-resident or not); further rows wait for a wave of their own.
 * ROWWISE_WAVE: an H200's 132 SMs x 4 blocks of 512 threads, taken for every GPU (the cost
 * model does not know a card's SM count). Nothing where the profile has no such class. */
#define ROWWISE_WAVE 528.0
static double rowwise_ns(const CostModel *c, const Op *op) {
    if (!(op->rowwise_rows > 0) || !(op->rowwise_row_bytes > 0)) return 0;
    const Curve *cc = class_curve(c, "rowwise");
    if (!cc || !cc->n) return 0;
    double total = op->rowwise_rows * op->rowwise_row_bytes;
    double lo = exp(cc->x[0]);  /* below the smallest tensor measured: its rate (not latency) */
    double bw = curve_eval(cc, total > lo ? total : lo);
    if (!(bw > 0)) return 0;
    return ceil(op->rowwise_rows / ROWWISE_WAVE) * op->rowwise_row_bytes / bw * 1e9;
}

/* The time (s) of one adapter GEMM g of rank r and dtype d at `flops`, from the measured ranks
 * either side (log-linear in rank), or -1 when r lies outside them or nothing was measured. */
static double lora_gemm_s(const CostModel *c, DType d, int g, double r, double flops) {
    const struct LoraCurves *lc = &c->lora[d][g];
    if (lc->n == 0 || r < lc->rank[0] || r > lc->rank[lc->n - 1] || !(flops > 0)) return -1;
    int i = 0;
    while (i + 1 < lc->n && lc->rank[i + 1] <= r) i++;
    bool at = lc->rank[i] == r || i + 1 == lc->n;
    /* (a curve carried to a GPU without that dtype's path is empty) */
    if (lc->rate[i].n == 0 || (!at && lc->rate[i + 1].n == 0)) return -1;
    double t0 = flops / curve_eval(&lc->rate[i], flops);
    if (at) return t0;
    double t1 = flops / curve_eval(&lc->rate[i + 1], flops);
    double w = log(r / lc->rank[i]) / log(lc->rank[i + 1] / lc->rank[i]);
    return exp(log(t0) + w * (log(t1) - log(t0)));
}

/* The device time (s) of a LoRA adapter's GEMM op (Op.lora_rank): its forward GEMM, or its
 * backward's data and weight gradients (the weight's alone when it launches one), each an equal
 * share of the FLOPs; -1 when the profile has no curves for it. */
static double lora_op_s(const CostModel *c, const Op *op) {
    bool a = op->lora_role == 'A';
    if (op->phase != PH_BWD)
        return lora_gemm_s(c, op->compute_dtype, a ? COST_LORA_A_FWD : COST_LORA_B_FWD, op->lora_rank, op->flops);
    int parts = op->gemms == 1 ? 1 : 2;
    double f = op->flops / parts;
    double w = lora_gemm_s(c, op->compute_dtype, a ? COST_LORA_A_WGRAD : COST_LORA_B_WGRAD, op->lora_rank, f);
    if (parts == 1 || w < 0) return w;
    double dg = lora_gemm_s(c, op->compute_dtype, a ? COST_LORA_A_DGRAD : COST_LORA_B_DGRAD, op->lora_rank, f);
    return dg < 0 ? -1 : w + dg;
}

/* The time (s) of grouped GEMM g (COST_GMM_*) of op's shape over `rows` pairs, or -1 where this
 * GPU's table has no curve for it. */
static double grouped_gemm_s(const CostModel *c, const Op *op, int g, double rows) {
    for (int i = 0; i < c->n_gmm; i++) {
        const struct GmmCurve *m = &c->gmm[i];
        if (m->gemm == g && m->nn == op->gmm_nn && m->experts == op->gmm_experts && m->n == op->gmm_n &&
            m->k == op->gmm_k) {
            double r = curve_eval(&m->rate, rows);
            return r > 0 ? rows / r : -1;
        }
    }
    return -1;
}

/* The device time (s) of a grouped GEMM op (Op.gmm_experts) from the GPU's own table: its
 * forward, or its backward's input and weight gradients (those Op.gmm_grads names); -1 when the
 * table lacks one of them. */
static double grouped_s(const CostModel *c, const Op *op) {
    if (c->n_gmm == 0 || !(op->gmm_rows > 0)) return -1;
    if (op->phase != PH_BWD) return grouped_gemm_s(c, op, COST_GMM_FWD, op->gmm_rows);
    if (!(op->gmm_grads & 3)) return -1;
    double t = 0;
    for (int b = 0; b < 2; b++) {
        if (!(op->gmm_grads & (1 << b))) continue;
        double s = grouped_gemm_s(c, op, b == 0 ? COST_GMM_DGRAD : COST_GMM_WGRAD, op->gmm_rows);
        if (s < 0) return -1;
        t += s;
    }
    return t;
}

/* The device time (s) of a dispatch index op (Op.moe_index) from the GPU's own table (a gather's
 * backward: IndexBackward0's), or -1 where it has none. */
static double moe_index_s(const CostModel *c, const Op *op) {
    int k = op->moe_index;
    if (k <= COST_MOE_NONE || k >= COST_MOE_COUNT || !(op->moe_size > 0)) return -1;
    if (k == COST_MOE_GATHER && op->moe_dup) k = COST_MOE_GATHER_DUP;
    if (op->phase == PH_BWD) {
        if (k == COST_MOE_GATHER) k = COST_MOE_GATHER_BWD;
        else if (k == COST_MOE_GATHER_DUP) k = COST_MOE_GATHER_DUP_BWD;
        else return -1; /* the others make no gradient */
    }
    double r = curve_eval(&c->moe[k], op->moe_size);
    return r > 0 ? op->moe_size / r : -1;
}

double cost_op_ns(const CostModel *c, const Op *op) {
    if (op->kind_id == OPK_NONE) return 0.0;
    if (op->stream != STREAM_COMPUTE || op->kind_id == OPK_CPU_ADAM || op->kind_id == OPK_CPU_ADAMW_TORCH ||
        (op->kind_id == OPK_COLLECTIVE && op->world > 1))
        return device_op_ns(&c->dev, op);
    /* a mixture of experts' grouped GEMM or dispatch index op measured on this GPU: the time per
     * call the events measured, its kernels and their gaps included */
    double t_moe = op->gmm_experts > 0 && op->kind_id == OPK_MM ? grouped_s(c, op)
                   : op->moe_index > 0 ? moe_index_s(c, op) : -1;
    if (t_moe >= 0) {
        double t = t_moe * 1e9;
        return t > c->kernel_ns ? t : c->kernel_ns;
    }
    /* a LoRA adapter's GEMM: its kernels' measured time (carried by compute), where the profile
     * has it, in place of its FLOPs' time below; either way no shorter than its bytes' */
    double t_lora = op->lora_rank > 0 && op->kind_id == OPK_MM ? lora_op_s(c, op) : -1;
    double t_c = t_lora >= 0 ? t_lora : 0;
    bool attention = op->kind_id == OPK_ATTENTION;
    double rate_at = op->rate_at > 1 ? op->rate_at : 1; /* (op_fields.h) */
    /* fused attention: the rate PyTorch's kernel of that backend reached at this size, where the
     * profile measured one at least this large (below, the GEMM path's estimate) */
    const Curve *fc = attention ? flops_curve(c, op->kind, op->phase == PH_BWD) : NULL;
    if (t_lora >= 0) {
        /* priced above */
    } else if (fc && fc->n && op->flops > 0 && log(op->flops * rate_at) >= fc->x[0]) {
        t_c = op->flops / curve_eval(fc, op->flops * rate_at);
    } else if (op->flops > 0) {
        /* convolutions run as implicit GEMMs; fused attention as GEMM-bound tiles */
        bool gemm = attention || op->kind_id == OPK_MM || op->kind_id == OPK_CONV;
        /* a backward GEMM op runs one GEMM per input that needs a gradient (input and weight
         * gradients), each of an equal share of its FLOPs */
        int parts = gemm && op->phase == PH_BWD ? (op->gemms > 0 ? op->gemms : 2) : 1;
        double f = op->flops / parts;
        double rate = gemm ? cost_gemm_rate(c, op->compute_dtype, f)
                           : c->dev.peak_flops[DT_FP32] * (c->dev.eff_compute > 0 ? c->dev.eff_compute : 1);
        if (rate > 0) t_c = parts * f / rate;
    }
    const Curve *cc = class_curve(c, op->kind);
    double bw;
    if (cc && cc->n && log(op->bytes_moved > 0 ? op->bytes_moved : 1) < cc->x[0]) {
        /* smaller than any measured problem of this class: the generic bandwidth curve (which
         * reaches down to 1 MiB) scaled by the class's efficiency where the two meet */
        double x0 = exp(cc->x[0]);
        double ratio = cc->y[0] / cost_mem_rate(c, x0);
        bw = cost_mem_rate(c, op->bytes_moved) * (ratio < 1 ? ratio : 1);
    } else {
        bw = cc && cc->n ? curve_eval(cc, op->bytes_moved) : cost_mem_rate(c, op->bytes_moved);
    }
    double t_m = bw > 0 ? op->bytes_moved / bw : 0;
    double t = (t_c > t_m ? t_c : t_m) * 1e9;
    t += layout_ns(c, op) + rowwise_ns(c, op);
    /* each kernel is followed by the stream's dead time before the next starts; no kernel with
     * its gap is shorter than an empty one back to back */
    int kernels = op->compiled == 2 ? 0 : op->kernels > 1 ? op->kernels : 1; /* 0: fused */
    t += kernels * c->gap_ns;
    if (t < kernels * c->kernel_ns) t = kernels * c->kernel_ns;
    return t;
}

/* Shifts a curve's sizes by factor sx and scales its rates by ry, then rebuilds its
 * interpolation; ry == 0 empties it. */
static VrStatus curve_carry(Curve *c, double sx, double ry) {
    if (c->n == 0) return VR_OK;
    if (!(ry > 0)) {
        curve_free(c);
        memset(c, 0, sizeof *c);
        return VR_OK;
    }
    double dx = log(sx);
    for (int i = 0; i < c->n; i++) c->x[i] += dx, c->y[i] *= ry;
    if (c->interp && gsl_interp_init(c->interp, c->x, c->y, (size_t)c->n) != GSL_SUCCESS)
        return VR_EINVAL;
    return VR_OK;
}

static const struct { const char *table, *kind; } SDPA_BACKENDS[COST_SDPA_COUNT] = {
    [COST_SDPA_CUDNN] = {"cudnn", "attention_cudnn"},
    [COST_SDPA_FLASH] = {"flash", "attention_flash"},
    [COST_SDPA_EFFICIENT] = {"efficient", "attention_mem_efficient"},
    /* FlexAttention's Triton kernels (torch.compile(flex_attention)), not an SDPA backend but
     * timed by the same rows */
    [COST_SDPA_FLEX] = {"flex", "attention_flex"},
};

/* The rate ratio a FLOP-rate class carries with: its fused-attention backend's where k gives one
 * (the backend's curves: "attention_flash", its backward "attention_flash_bwd", its "_cross" and
 * "_masked" variants), else bf16's. */
static double class_ratio(const CostModel *c, int i, const CostCarry *k) {
    for (int b = 0; b < COST_SDPA_COUNT; b++) {
        size_t n = strlen(SDPA_BACKENDS[b].kind);
        const char *rest = c->class_name[i] + n;
        if (strncmp(c->class_name[i], SDPA_BACKENDS[b].kind, n) == 0 && (*rest == '\0' || *rest == '_') &&
            k->attention[b] > 0)
            return k->attention[b];
    }
    return k->compute[DT_BF16];
}

VrStatus cost_carry(CostModel *c, const DeviceSpec *target, const CostCarry *k) {
    if (!(k->sm > 0) || !(k->bw > 0)) return VR_EINVAL;
    for (int b = 0; b < COST_SDPA_COUNT; b++)
        if (k->attention[b] < 0 || !isfinite(k->attention[b])) return VR_EINVAL;
    VrStatus st = VR_OK;
    for (int d = 0; d < DT_COUNT && !st; d++) st = curve_carry(&c->gemm[d], k->sm, k->compute[d]);
    if (!st) st = curve_carry(&c->mem, k->bw, k->bw);
    for (int i = 0; i < c->n_classes && !st; i++)
        st = c->cls_by_flops[i] ? curve_carry(&c->cls[i], k->sm, class_ratio(c, i, k))
                                : curve_carry(&c->cls[i], k->bw, k->bw);
    for (int d = 0; d < DT_COUNT && !st; d++)
        for (int g = 0; g < COST_LORA_GEMMS && !st; g++)
            for (int i = 0; i < c->lora[d][g].n && !st; i++)
                st = curve_carry(&c->lora[d][g].rate[i], k->sm, k->compute[d]);
    if (!st) c->dev = *target;
    return st;
}

void cost_set_kernel_ns(CostModel *c, double ns) { c->kernel_ns = ns > 0 ? ns : 0; }
void cost_set_kernel_gap_ns(CostModel *c, double ns) { c->gap_ns = ns > 0 ? ns : 0; }

/* ---- a measured profile into curves ---------------------------------------------------- */


const char *cost_sdpa_backend(int b) {
    return b >= 0 && b < COST_SDPA_COUNT ? SDPA_BACKENDS[b].table : NULL;
}

double cost_sdpa_flops(double batch, double heads, double seq_q, double seq_k, double dim,
                       bool causal) {
    double f = 4 * batch * heads * seq_q * seq_k * dim;
    return causal ? f / 2 : f;
}

static VrStatus bad_row(char *why, size_t why_n, const char *table, int row, const char *what) {
    if (why && why_n) snprintf(why, why_n, "%s row %d: %s", table, row + 1, what);
    return VR_EINVAL;
}

/* The point of a streaming row (bytes moved, bytes/s), or VR_EINVAL. */
static VrStatus stream_point(const CostStreamRow *r, CostPoint *out) {
    if (!(r->ms > 0) || !(r->gbps > 0) || !isfinite(r->ms) || !isfinite(r->gbps)) return VR_EINVAL;
    *out = (CostPoint){r->gbps * 1e9 * r->ms * 1e-3, r->gbps * 1e9};
    return VR_OK;
}

/* The GEMM curves: pts gets every read row's point grouped by dtype, n_gemm[d] counting each.
 * Where a dtype has kernel-time rows, its other rows up to their largest FLOPs are not read. */
static VrStatus gemm_points(const CostProfile *p, CostPoint *pts, const CostPoint *gemm[DT_COUNT],
                            int n_gemm[DT_COUNT], char *why, size_t why_n) {
    /* each row's dtype, parsed once (-1: tf32, measured but not read, cost.h) */
    int *dts = malloc(sizeof(int) * (size_t)(p->n_gemm > 0 ? p->n_gemm : 1));
    if (!dts) return VR_ENOMEM;
    double kernel_top[DT_COUNT] = {0}; /* the largest kernel-time problem of each dtype */
    for (int i = 0; i < p->n_gemm; i++) {
        const CostGemmRow *r = &p->gemm[i];
        DType dt;
        if (!r->dtype) { free(dts); return bad_row(why, why_n, "gemm", i, "no dtype"); }
        if (strcmp(r->dtype, "tf32") == 0) { dts[i] = -1; continue; }
        if (dtype_parse(r->dtype, &dt) != VR_OK) {
            free(dts);
            return bad_row(why, why_n, "gemm", i, "a dtype vrsim does not know");
        }
        dts[i] = (int)dt;
        double f = 2 * r->m * r->n * r->k * r->batch;
        if (r->kernel_time && f > kernel_top[dt]) kernel_top[dt] = f;
    }
    int used = 0;
    for (int d = 0; d < DT_COUNT; d++) {
        gemm[d] = pts + used;
        n_gemm[d] = 0;
        for (int i = 0; i < p->n_gemm; i++) {
            const CostGemmRow *r = &p->gemm[i];
            if (dts[i] != d) continue;
            double f = 2 * r->m * r->n * r->k * r->batch;
            if (!(r->m > 0) || !(r->n > 0) || !(r->k > 0) || !(r->batch > 0) || !(r->tflops > 0) ||
                !isfinite(f) || !isfinite(r->tflops)) {
                free(dts);
                return bad_row(why, why_n, "gemm", i, "m, n, k, batch and tflops must be > 0");
            }
            if (!r->kernel_time && f <= kernel_top[d]) continue; /* superseded: a launch, timed */
            pts[used++] = (CostPoint){f, r->tflops * 1e12};
            n_gemm[d]++;
        }
    }
    free(dts);
    return VR_OK;
}

/* One bandwidth class per torch_ops class, in the order each class first appears. */
static VrStatus torch_op_classes(CostModel *c, const CostProfile *p, CostPoint *pts, char *why,
                                 size_t why_n) {
    for (int i = 0; i < p->n_torch_ops; i++) {
        const char *cls = p->torch_ops[i].cls;
        if (!cls || !cls[0]) return bad_row(why, why_n, "torch_ops", i, "no class");
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) seen = strcmp(p->torch_ops[j].cls, cls) == 0;
        if (seen) continue;
        int n = 0;
        for (int j = i; j < p->n_torch_ops; j++) {
            const CostStreamRow *r = &p->torch_ops[j];
            if (!r->cls || strcmp(r->cls, cls) != 0) continue;
            if (stream_point(r, &pts[n]) != VR_OK)
                return bad_row(why, why_n, "torch_ops", j, "ms and gbps must be > 0");
            n++;
        }
        VrStatus st = cost_add_class(c, cls, pts, n);
        if (st == VR_EINVAL) return bad_row(why, why_n, "torch_ops", i, "too many classes, or a class name too long");
        if (st) return st;
    }
    return VR_OK;
}


static SdpaVariant sdpa_variant(const CostSdpaRow *r) {
    if (!r->kernel_time) return SDPA_SELF;
    if (r->masked) return fmod(r->seq_k, 8) != 0 ? SDPA_MASKED_UNALIGNED : SDPA_MASKED;
    /* FlexAttention's Triton kernels at head dim 64 reach 0.7x the rate they reach at 128 for the
     * same FLOPs (validation/results/flex_attention_h100_sxm.json): curves of their own */
    if (r->fwd_ms[COST_SDPA_FLEX] > 0 && r->dim <= 64) return SDPA_FLEX_D64;
    return r->seq_k < r->seq_q ? SDPA_CROSS : SDPA_SELF;
}

/* The forward and backward FLOP-rate curves of every backend the sdpa rows of variant v timed,
 * each point's FLOPs times sx and its rate times ry (1 and 1 on the GPU that measured them; a
 * carry's ratios on another, cost_measured_sdpa). */
static VrStatus sdpa_classes(CostModel *c, const CostProfile *p, SdpaVariant v, double sx, double ry,
                             CostPoint *fwd, CostPoint *bwd, char *why, size_t why_n) {
    bool kernel_rows = false;
    for (int i = 0; i < p->n_sdpa; i++) kernel_rows = kernel_rows || p->sdpa[i].kernel_time;
    for (int b = 0; b < COST_SDPA_COUNT; b++) {
        int n = 0;
        for (int i = 0; i < p->n_sdpa; i++) {
            const CostSdpaRow *r = &p->sdpa[i];
            double f_ms = r->fwd_ms[b], fb_ms = r->fwdbwd_ms[b];
            if (f_ms == 0 && fb_ms == 0) continue; /* this backend not timed on this shape */
            double flops = cost_sdpa_flops(r->batch, r->heads, r->seq_q, r->seq_k, r->dim, r->causal);
            if (!(flops > 0) || !isfinite(flops))
                return bad_row(why, why_n, "sdpa", i, "batch, heads, seq_q, seq_k and dim must be > 0");
            if (!(f_ms > 0) || !(fb_ms > f_ms) || !isfinite(fb_ms))
                return bad_row(why, why_n, "sdpa", i, "a backend needs fwdbwd_ms > fwd_ms > 0");
            if (kernel_rows && !r->kernel_time) continue;          /* superseded (cost.h) */
            if (sdpa_variant(r) != v) continue;
            if (!r->kernel_time && f_ms < COST_SDPA_MIN_TIMED_MS) continue; /* launch-bound */
            fwd[n] = (CostPoint){flops * sx, flops / (f_ms * 1e-3) * ry};
            double bf = COST_SDPA_BWD_FLOPS * flops;
            bwd[n] = (CostPoint){bf * sx, bf / ((fb_ms - f_ms) * 1e-3) * ry};
            n++;
        }
        if (n == 0) continue;
        char name[44], bname[48]; /* the longest: "attention_mem_efficient_masked_unaligned_bwd" */
        snprintf(name, sizeof name, "%s%s", SDPA_BACKENDS[b].kind, SDPA_SUFFIX[v]);
        snprintf(bname, sizeof bname, "%s_bwd", name);
        VrStatus st = cost_add_flops_class(c, name, fwd, n);
        if (!st) st = cost_add_flops_class(c, bname, bwd, n);
        if (st == VR_EINVAL) return bad_row(why, why_n, "sdpa", 0, "too many curves, or a curve name too long");
        if (st) return st;
    }
    return VR_OK;
}

static const char *const LORA_GEMM_NAMES[COST_LORA_GEMMS] = {
    [COST_LORA_A_FWD] = "A_fwd", [COST_LORA_B_FWD] = "B_fwd", [COST_LORA_A_DGRAD] = "A_dgrad",
    [COST_LORA_A_WGRAD] = "A_wgrad", [COST_LORA_B_DGRAD] = "B_dgrad", [COST_LORA_B_WGRAD] = "B_wgrad"};

/* The `lora_gemm` rows as curves (cost.h): pts has room for p->n_lora points. */
static VrStatus lora_curves(CostModel *c, const CostProfile *p, CostPoint *pts, char *why, size_t why_n) {
    int *dt = malloc(sizeof(int) * (size_t)(p->n_lora > 0 ? p->n_lora : 1));
    int *gm = malloc(sizeof(int) * (size_t)(p->n_lora > 0 ? p->n_lora : 1));
    VrStatus st = dt && gm ? VR_OK : VR_ENOMEM;
    for (int i = 0; !st && i < p->n_lora; i++) {
        const CostLoraRow *r = &p->lora[i];
        DType d = DT_FP32;
        gm[i] = -1;
        for (int g = 0; g < COST_LORA_GEMMS; g++)
            if (r->gemm && strcmp(r->gemm, LORA_GEMM_NAMES[g]) == 0) gm[i] = g;
        if (!r->dtype || dtype_parse(r->dtype, &d) != VR_OK)
            st = bad_row(why, why_n, "lora_gemm", i, "a dtype vrsim does not know");
        else if (gm[i] < 0)
            st = bad_row(why, why_n, "lora_gemm", i, "gemm must be A_fwd, B_fwd, A_dgrad, A_wgrad, B_dgrad or B_wgrad");
        else if (!(r->rank >= 1) || !(r->tokens > 0) || !(r->width > 0) || !(r->ms > 0) ||
                 !isfinite(r->rank * r->tokens * r->width * r->ms))
            st = bad_row(why, why_n, "lora_gemm", i, "rank, tokens, width and ms must be > 0");
        dt[i] = (int)d;
    }
    /* one curve per (dtype, gemm, rank), ranks kept in ascending order */
    for (int i = 0; !st && i < p->n_lora; i++) {
        struct LoraCurves *lc = &c->lora[dt[i]][gm[i]];
        double r = p->lora[i].rank;
        int j = 0;
        while (j < lc->n && lc->rank[j] < r) j++;
        if (j < lc->n && lc->rank[j] == r) continue; /* made with an earlier row of its rank */
        if (lc->n == COST_LORA_RANKS) {
            st = bad_row(why, why_n, "lora_gemm", i, "more distinct ranks than vrsim keeps for one GEMM");
            break;
        }
        int n = 0;
        for (int k = i; k < p->n_lora; k++) {
            const CostLoraRow *q = &p->lora[k];
            if (dt[k] != dt[i] || gm[k] != gm[i] || q->rank != r) continue;
            double f = 2 * q->tokens * q->width * q->rank;
            pts[n++] = (CostPoint){f, f / (q->ms * 1e-3)};
        }
        memmove(&lc->rank[j + 1], &lc->rank[j], sizeof lc->rank[0] * (size_t)(lc->n - j));
        memmove(&lc->rate[j + 1], &lc->rate[j], sizeof lc->rate[0] * (size_t)(lc->n - j));
        lc->rank[j] = r;
        lc->n++;
        st = curve_init(&lc->rate[j], pts, n);
    }
    free(dt);
    free(gm);
    return st;
}

VrStatus cost_from_profile(const DeviceSpec *dev, const CostProfile *p, CostModel **out,
                           char *why, size_t why_n) {
    *out = NULL;
    if (why && why_n) why[0] = '\0';
    if (p->n_gemm < 0 || p->n_stream < 0 || p->n_torch_ops < 0 || p->n_sdpa < 0 || p->n_lora < 0)
        return VR_EINVAL;
    int most = p->n_gemm;
    if (p->n_lora > most) most = p->n_lora;
    if (p->n_stream > most) most = p->n_stream;
    if (p->n_torch_ops > most) most = p->n_torch_ops;
    if (2 * p->n_sdpa > most) most = 2 * p->n_sdpa;
    CostPoint *pts = malloc(sizeof *pts * (size_t)(most > 0 ? most : 1));
    if (!pts) return VR_ENOMEM;
    const CostPoint *gemm[DT_COUNT];
    int n_gemm[DT_COUNT];
    CostModel *c = NULL;
    VrStatus st = gemm_points(p, pts, gemm, n_gemm, why, why_n);
    CostPoint *mem = NULL;
    if (!st && p->n_stream > 0) {
        mem = malloc(sizeof *mem * (size_t)p->n_stream);
        if (!mem) st = VR_ENOMEM;
        for (int i = 0; !st && i < p->n_stream; i++)
            if (stream_point(&p->stream[i], &mem[i]) != VR_OK)
                st = bad_row(why, why_n, "copy/elementwise", i, "ms and gbps must be > 0");
    }
    if (!st) st = cost_new(dev, gemm, n_gemm, mem, p->n_stream, &c);
    free(mem);
    if (!st) {
        cost_set_kernel_ns(c, p->launch_device_us * 1e3);
        cost_set_kernel_gap_ns(c, p->kernel_gap_us * 1e3);
        st = torch_op_classes(c, p, pts, why, why_n);
    }
    for (int v = 0; v < SDPA_VARIANTS && !st; v++)
        st = sdpa_classes(c, p, (SdpaVariant)v, 1, 1, pts, pts + p->n_sdpa, why, why_n);
    if (!st && p->n_lora > 0) st = lora_curves(c, p, pts, why, why_n);
    free(pts);
    if (st) {
        cost_free(c);
        return st;
    }
    *out = c;
    return VR_OK;
}

VrStatus cost_measured_here(CostModel *c, const CostProfile *own, char *why, size_t why_n) {
    if (why && why_n) why[0] = '\0';
    if (own->n_stream < 0 || own->n_torch_ops < 0) return VR_EINVAL;
    int most = own->n_stream > own->n_torch_ops ? own->n_stream : own->n_torch_ops;
    CostPoint *pts = malloc(sizeof *pts * (size_t)(most > 0 ? most : 1));
    if (!pts) return VR_ENOMEM;
    VrStatus st = VR_OK;
    for (int i = 0; !st && i < own->n_stream; i++)
        if (stream_point(&own->stream[i], &pts[i]) != VR_OK)
            st = bad_row(why, why_n, "copy/elementwise", i, "ms and gbps must be > 0");
    if (!st && own->n_stream > 0) {
        Curve mem;
        st = curve_init(&mem, pts, own->n_stream);
        if (st) {
            curve_free(&mem);
        } else {
            curve_free(&c->mem);
            c->mem = mem;
        }
    }
    if (!st) st = torch_op_classes(c, own, pts, why, why_n);
    if (!st && own->kernel_gap_us > 0) cost_set_kernel_gap_ns(c, own->kernel_gap_us * 1e3);
    free(pts);
    return st;
}

VrStatus cost_measured_sdpa(CostModel *c, const CostSdpaRow *rows, int n, double sx, double ry,
                            char *why, size_t why_n) {
    if (why && why_n) why[0] = '\0';
    if (n < 0 || !(sx > 0) || !(ry > 0) || !isfinite(sx) || !isfinite(ry)) return VR_EINVAL;
    /* every row checked before any curve is replaced: a bad table leaves c as it was */
    for (int i = 0; i < n; i++) {
        const CostSdpaRow *r = &rows[i];
        if (!r->kernel_time)
            return bad_row(why, why_n, "sdpa", i, "not kernel time (kernel_time = true rows only)");
        double flops = cost_sdpa_flops(r->batch, r->heads, r->seq_q, r->seq_k, r->dim, r->causal);
        if (!(flops > 0) || !isfinite(flops))
            return bad_row(why, why_n, "sdpa", i, "batch, heads, seq_q, seq_k and dim must be > 0");
        for (int b = 0; b < COST_SDPA_COUNT; b++) {
            double f_ms = r->fwd_ms[b], fb_ms = r->fwdbwd_ms[b];
            if (f_ms == 0 && fb_ms == 0) continue;
            if (!(f_ms > 0) || !(fb_ms > f_ms) || !isfinite(fb_ms))
                return bad_row(why, why_n, "sdpa", i, "a backend needs fwdbwd_ms > fwd_ms > 0");
        }
    }
    if (n == 0) return VR_OK;
    CostPoint *pts = malloc(sizeof *pts * 2 * (size_t)n);
    if (!pts) return VR_ENOMEM;
    CostProfile p = {.sdpa = rows, .n_sdpa = n};
    VrStatus st = VR_OK;
    for (int v = 0; v < SDPA_VARIANTS && !st; v++)
        st = sdpa_classes(c, &p, (SdpaVariant)v, sx, ry, pts, pts + n, why, why_n);
    free(pts);
    return st;
}

VrStatus cost_measured_gemm(CostModel *c, const CostGemmRow *rows, int n, double sx, double ry,
                            char *why, size_t why_n) {
    if (why && why_n) why[0] = '\0';
    if (n < 0 || !(sx > 0) || !(ry > 0) || !isfinite(sx) || !isfinite(ry)) return VR_EINVAL;
    if (n == 0) return VR_OK;
    /* the rows read: kernel time, or single calls timed for at least COST_SDPA_MIN_TIMED_MS
     * (shorter, the call's launch is much of the figure); a row that cannot be a point stays, for
     * gemm_points to name it */
    CostGemmRow *kept = malloc(sizeof *kept * (size_t)n);
    CostPoint *pts = malloc(sizeof *pts * (size_t)n);
    if (!kept || !pts) { free(kept); free(pts); return VR_ENOMEM; }
    int m = 0;
    for (int i = 0; i < n; i++) {
        const CostGemmRow *r = &rows[i];
        double ms = 2 * r->m * r->n * r->k * r->batch / (r->tflops * 1e12) * 1e3;
        if (!r->kernel_time && r->tflops > 0 && ms < COST_SDPA_MIN_TIMED_MS) continue;
        kept[m++] = *r;
    }
    const CostPoint *gemm[DT_COUNT];
    int n_gemm[DT_COUNT];
    CostProfile p = {.gemm = kept, .n_gemm = m};
    VrStatus st = gemm_points(&p, pts, gemm, n_gemm, why, why_n);
    /* every curve built before any is replaced: a failure leaves c as it was */
    Curve made[DT_COUNT];
    memset(made, 0, sizeof made);
    for (int d = 0; d < DT_COUNT && !st; d++) {
        if (n_gemm[d] == 0) continue;
        st = curve_init(&made[d], gemm[d], n_gemm[d]);
        if (!st) st = curve_carry(&made[d], sx, ry);
    }
    for (int d = 0; d < DT_COUNT; d++) {
        if (!st && made[d].n > 0) {
            curve_free(&c->gemm[d]);
            c->gemm[d] = made[d];
            c->gemm_roofline_below[d] = true;
        } else {
            curve_free(&made[d]);
        }
    }
    free(kept);
    free(pts);
    return st;
}

static const char *const GMM_NAMES[COST_GMM_COUNT] = {
    [COST_GMM_FWD] = "fwd", [COST_GMM_DGRAD] = "dgrad", [COST_GMM_WGRAD] = "wgrad"};

/* The COST_MOE_* curve a `moe_index` row is a point of, or COST_MOE_NONE for an op vrsim does not
 * know. */
static int moe_curve_of(const CostMoeIndexRow *r) {
    static const struct { const char *op; int k; } OPS[] = {
        {"sort", COST_MOE_SORT}, {"histc", COST_MOE_HISTC}, {"cumsum", COST_MOE_CUMSUM},
        {"index_put", COST_MOE_INDEX_PUT}, {"index_fwd", COST_MOE_GATHER}, {"index_bwd", COST_MOE_GATHER_BWD}};
    for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
        if (r->op && strcmp(r->op, OPS[i].op) == 0) {
            int k = OPS[i].k;
            /* indices that repeat: more rows gathered than the source has */
            if ((k == COST_MOE_GATHER || k == COST_MOE_GATHER_BWD) && r->src_rows < r->n) k += 2;
            return k;
        }
    return COST_MOE_NONE;
}

/* A `moe_index` row's size: elements moved for a gather (rows x width), else its length. */
static double moe_row_size(const CostMoeIndexRow *r, int k) {
    return k >= COST_MOE_GATHER ? r->n * r->width : r->n;
}

VrStatus cost_set_moe(CostModel *c, const CostGroupedRow *gmm, int n_gmm, const CostMoeIndexRow *ix,
                      int n_ix, char *why, size_t why_n) {
    if (why && why_n) why[0] = '\0';
    if (n_gmm < 0 || n_ix < 0) return VR_EINVAL;
    int *g = malloc(sizeof(int) * (size_t)(n_gmm > 0 ? n_gmm : 1));
    CostPoint *pts = malloc(sizeof *pts * (size_t)(n_gmm + n_ix > 0 ? n_gmm + n_ix : 1));
    struct GmmCurve *cur = calloc((size_t)(n_gmm > 0 ? n_gmm : 1), sizeof *cur);
    Curve moe[COST_MOE_COUNT];
    memset(moe, 0, sizeof moe);
    int n_cur = 0;
    VrStatus st = g && pts && cur ? VR_OK : VR_ENOMEM;
    /* every row checked; the balanced rows' gemms other than the cross-check's "bwd" read */
    for (int i = 0; !st && i < n_gmm; i++) {
        const CostGroupedRow *r = &gmm[i];
        g[i] = -1;
        for (int j = 0; j < COST_GMM_COUNT; j++)
            if (r->gemm && strcmp(r->gemm, GMM_NAMES[j]) == 0) g[i] = j;
        bool bwd = r->gemm && strcmp(r->gemm, "bwd") == 0;
        bool balanced = r->routing && strcmp(r->routing, "balanced") == 0;
        if (g[i] < 0 && !bwd)
            st = bad_row(why, why_n, "grouped_mm", i, "gemm must be fwd, dgrad, wgrad or bwd");
        else if (!r->layout || (strcmp(r->layout, "nt") != 0 && strcmp(r->layout, "nn") != 0))
            st = bad_row(why, why_n, "grouped_mm", i, "layout must be nt or nn");
        else if (!balanced && !(r->routing && strncmp(r->routing, "record:", 7) == 0))
            st = bad_row(why, why_n, "grouped_mm", i, "routing must be balanced or record:<name>");
        else if (!(r->experts >= 1) || !(r->rows > 0) || !(r->n > 0) || !(r->k > 0) || !(r->ms > 0) ||
                 !isfinite(r->experts * r->rows * r->n * r->k * r->ms))
            st = bad_row(why, why_n, "grouped_mm", i, "experts, rows, n, k and ms must be > 0");
        if (!balanced) g[i] = -1;
    }
    for (int i = 0; !st && i < n_gmm; i++) {
        if (g[i] < 0) continue;
        const CostGroupedRow *r = &gmm[i];
        bool nn = strcmp(r->layout, "nn") == 0;
        int j = 0;
        while (j < n_cur && !(cur[j].gemm == g[i] && cur[j].nn == nn && cur[j].experts == r->experts &&
                              cur[j].n == r->n && cur[j].k == r->k))
            j++;
        if (j < n_cur) continue; /* made with an earlier row of its shape */
        int n = 0;
        for (int q = i; q < n_gmm; q++) {
            const CostGroupedRow *o = &gmm[q];
            if (g[q] == g[i] && (strcmp(o->layout, "nn") == 0) == nn && o->experts == r->experts &&
                o->n == r->n && o->k == r->k)
                pts[n++] = (CostPoint){o->rows, o->rows / (o->ms * 1e-3)};
        }
        cur[n_cur] = (struct GmmCurve){g[i], nn, r->experts, r->n, r->k, {0}};
        st = curve_init(&cur[n_cur].rate, pts, n);
        n_cur++;
    }
    for (int i = 0; !st && i < n_ix; i++) {
        const CostMoeIndexRow *r = &ix[i];
        int k = moe_curve_of(r);
        if (k == COST_MOE_NONE)
            st = bad_row(why, why_n, "moe_index", i, "op must be sort, histc, cumsum, index_put, index_fwd or index_bwd");
        else if (!(r->n > 0) || !(r->ms > 0) || (k >= COST_MOE_GATHER && !(r->width > 0 && r->src_rows > 0)) ||
                 !isfinite(r->n * r->ms * r->width * r->src_rows))
            st = bad_row(why, why_n, "moe_index", i, "n and ms (and a gather's src_rows and width) must be > 0");
    }
    for (int k = COST_MOE_SORT; !st && k < COST_MOE_COUNT; k++) {
        int n = 0;
        for (int i = 0; i < n_ix; i++) {
            if (moe_curve_of(&ix[i]) != k) continue;
            double size = moe_row_size(&ix[i], k);
            pts[n++] = (CostPoint){size, size / (ix[i].ms * 1e-3)};
        }
        st = curve_init(&moe[k], pts, n);
    }
    if (st) {
        for (int i = 0; i < n_cur; i++) curve_free(&cur[i].rate);
        for (int k = 0; k < COST_MOE_COUNT; k++) curve_free(&moe[k]);
        free(cur);
    } else {
        for (int i = 0; i < c->n_gmm; i++) curve_free(&c->gmm[i].rate);
        free(c->gmm);
        for (int k = 0; k < COST_MOE_COUNT; k++) curve_free(&c->moe[k]);
        c->gmm = cur;
        c->n_gmm = n_cur;
        memcpy(c->moe, moe, sizeof moe);
    }
    free(g);
    free(pts);
    return st;
}
