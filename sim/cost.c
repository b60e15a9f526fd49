/* cost.c: calibrated op costs (see cost.h). Curves are piecewise linear in log(size), built once
 * per plan with gsl_interp and evaluated with an accelerator per curve. */
#include "cost.h"

#include <math.h>
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

#define COST_CLASSES 32

struct CostModel {
    DeviceSpec dev;
    char class_name[COST_CLASSES][32]; /* memory-access classes measured through PyTorch */
    Curve cls[COST_CLASSES];
    bool cls_by_flops[COST_CLASSES];   /* a FLOP-rate curve (fused attention), not bandwidth */
    int n_classes;
    double kernel_ns;       /* device time of an empty kernel back to back (per kernel floor) */
    double gap_ns;          /* dead time between back-to-back kernels, beyond their own time */
    Curve gemm[DT_COUNT];
    Curve mem;
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

static VrStatus add_class(CostModel *c, const char *name, const CostPoint *pts, int n,
                          bool by_flops) {
    int i;
    for (i = 0; i < c->n_classes; i++)
        if (strcmp(c->class_name[i], name) == 0) break;
    if (i == c->n_classes) {
        if (c->n_classes == COST_CLASSES || strlen(name) >= sizeof c->class_name[0]) return VR_EINVAL;
        c->n_classes++;
    } else {
        curve_free(&c->cls[i]);
    }
    snprintf(c->class_name[i], sizeof c->class_name[i], "%s", name);
    c->cls_by_flops[i] = by_flops;
    return curve_init(&c->cls[i], pts, n);
}

VrStatus cost_add_class(CostModel *c, const char *name, const CostPoint *pts, int n) {
    return add_class(c, name, pts, n, false);
}

VrStatus cost_add_flops_class(CostModel *c, const char *name, const CostPoint *pts, int n) {
    return add_class(c, name, pts, n, true);
}

/* The FLOP-rate curve of a fused-attention kind ("attention_cudnn"; its backward's is
 * "attention_cudnn_bwd"), or NULL. */
static const Curve *flops_curve(const CostModel *c, const char *kind, bool backward) {
    char name[sizeof c->class_name[0]];
    if (!kind || snprintf(name, sizeof name, "%s%s", kind, backward ? "_bwd" : "") >= (int)sizeof name)
        return NULL;
    for (int i = 0; i < c->n_classes; i++)
        if (c->cls_by_flops[i] && strcmp(c->class_name[i], name) == 0) return &c->cls[i];
    return NULL;
}

static const Curve *class_curve(const CostModel *c, const char *kind) {
    if (!kind) return NULL;
    /* generic elementwise kernels are the contiguous class */
    const char *k = strcmp(kind, "elementwise") == 0 ? "contiguous" : kind;
    for (int i = 0; i < c->n_classes; i++)
        if (!c->cls_by_flops[i] && strcmp(c->class_name[i], k) == 0) return &c->cls[i];
    /* a dtype-specific class ("foreach_fp32") a profile did not measure: its generic one */
    size_t n = strlen(k);
    if (n > 5 && strcmp(k + n - 5, "_fp32") == 0) {
        for (int i = 0; i < c->n_classes; i++)
            if (!c->cls_by_flops[i] && strlen(c->class_name[i]) == n - 5 &&
                strncmp(c->class_name[i], k, n - 5) == 0)
                return &c->cls[i];
    }
    return NULL;
}

void cost_free(CostModel *c) {
    if (!c) return;
    for (int i = 0; i < c->n_classes; i++) curve_free(&c->cls[i]);
    for (int d = 0; d < DT_COUNT; d++) curve_free(&c->gemm[d]);
    curve_free(&c->mem);
    free(c);
}

double cost_gemm_rate(const CostModel *c, DType d, double flops) {
    double r = curve_eval(&c->gemm[d], flops);
    if (r > 0) return r;
    double peak = c->dev.peak_flops[d] > 0 ? c->dev.peak_flops[d] : c->dev.peak_flops[DT_FP32];
    return peak * (c->dev.eff_compute > 0 ? c->dev.eff_compute : 1);
}

double cost_mem_rate(const CostModel *c, double bytes) {
    double r = curve_eval(&c->mem, bytes);
    if (r > 0) return r;
    return c->dev.mem_bw * (c->dev.eff_memory > 0 ? c->dev.eff_memory : 1);
}

double cost_op_ns(const CostModel *c, const Op *op) {
    if (op->kind && strcmp(op->kind, "none") == 0) return 0.0;
    if (op->stream != 0 || (op->kind && strncmp(op->kind, "cpu_adam", 8) == 0))
        return device_op_ns(&c->dev, op);
    double t_c = 0;
    bool attention = op->kind && strncmp(op->kind, "attention", 9) == 0;
    /* fused attention: the rate PyTorch's kernel of that backend reached at this size, where the
     * profile measured one at least this large (below, the GEMM path's estimate) */
    const Curve *fc = attention ? flops_curve(c, op->kind, op->phase == PH_BWD) : NULL;
    if (fc && fc->n && op->flops > 0 && log(op->flops) >= fc->x[0]) {
        t_c = op->flops / curve_eval(fc, op->flops);
    } else if (op->flops > 0) {
        /* convolutions run as implicit GEMMs; fused attention as GEMM-bound tiles */
        bool gemm = attention || (op->kind && (strcmp(op->kind, "mm") == 0 ||
                                               strcmp(op->kind, "conv") == 0));
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
    /* each kernel is followed by the stream's dead time before the next starts; no kernel with
     * its gap is shorter than an empty one back to back */
    int kernels = op->kernels > 1 ? op->kernels : 1;
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

VrStatus cost_carry(CostModel *c, const DeviceSpec *target, const CostCarry *k) {
    if (!(k->sm > 0) || !(k->bw > 0)) return VR_EINVAL;
    VrStatus st = VR_OK;
    for (int d = 0; d < DT_COUNT && !st; d++) st = curve_carry(&c->gemm[d], k->sm, k->compute[d]);
    if (!st) st = curve_carry(&c->mem, k->bw, k->bw);
    for (int i = 0; i < c->n_classes && !st; i++)
        st = c->cls_by_flops[i] ? curve_carry(&c->cls[i], k->sm, k->compute[DT_BF16])
                                : curve_carry(&c->cls[i], k->bw, k->bw);
    if (!st) c->dev = *target;
    return st;
}

void cost_set_kernel_ns(CostModel *c, double ns) { c->kernel_ns = ns > 0 ? ns : 0; }
void cost_set_kernel_gap_ns(CostModel *c, double ns) { c->gap_ns = ns > 0 ? ns : 0; }
