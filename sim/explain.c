/* explain.c: the --explain walk through a step (see explain.h). Everything printed is read from
 * the plan and the result: phases from the op spans, growth from the memory samples, the peak
 * from StepResult, the live set and the segment map from the second pass of engine_run. */
#include "explain.h"

#include <stdlib.h>
#include <string.h>

#include "report.h"

#define MIBF(b) ((double)(b) / 1048576.0)
#define GIBF(b) ((double)(b) / 1073741824.0)

/* "12.3 GiB" or "456.0 MiB" */
static const char *sz(char *buf, double bytes) {
    if (bytes < 0) bytes = -bytes;
    if (bytes >= 1073741824.0) snprintf(buf, 32, "%.2f GiB", bytes / 1073741824.0);
    else if (bytes >= 1048576.0) snprintf(buf, 32, "%.1f MiB", bytes / 1048576.0);
    else snprintf(buf, 32, "%.0f KiB", bytes / 1024.0);
    return buf;
}

static const char *pretty_cat(int c) {
    static const char *const names[CAT_COUNT] = {"parameters", "gradients", "optimizer state",
                                                 "activations", "temporaries"};
    return c >= 0 && c < CAT_COUNT ? names[c] : "?";
}

/* Where the op at index op sits, as a phrase. */
static const char *phase_words(Phase ph) {
    switch (ph) {
    case PH_BUILD: return "while the model and optimizer are built";
    case PH_FWD: return "in the forward pass";
    case PH_BWD: return "in the backward pass";
    case PH_RECOMPUTE: return "while backward recomputes a checkpointed region";
    case PH_OPTIM: return "in the optimizer step";
    case PH_ZERO_GRAD: return "in zero_grad";
    default: return "";
    }
}

static int span_phase(const Plan *p, int op) {
    if (op < 0 || op >= graph_num_ops(p->graph)) return PH_BUILD;
    return (int)graph_op_c(p->graph, op)->phase;
}

/* The samples of step `step`: [*lo, *hi). A sample is taken at the end of every op (after its
 * frees) and ops run in graph order every step, so a step starts where the op index goes down;
 * the samples of build ops come first. Returns false if the step has no samples. */
static bool step_samples(const Plan *p, const SimResult *r, int step, int *lo, int *hi) {
    int i = 0, k = 0;
    while (i < r->n_samples && span_phase(p, r->samples[i].op) == PH_BUILD) i++;
    *lo = i;
    for (; i < r->n_samples; i++) {
        if (i > *lo && r->samples[i].op < r->samples[i - 1].op) {
            if (k == step) break;
            k++;
            *lo = i;
        }
    }
    *hi = i;
    return k == step && *hi > *lo;
}

static void walk_phases(FILE *f, const Plan *p, const SimResult *r, int lo, int hi) {
    char a[32], b[32], c[32];
    /* phases in the order they begin within the step (recompute runs inside backward) */
    int order[PH_COUNT], n_order = 0;
    for (int i = lo; i < hi; i++) {
        int ph = span_phase(p, r->samples[i].op), k;
        for (k = 0; k < n_order; k++) if (order[k] == ph) break;
        if (k == n_order && ph != PH_BUILD) order[n_order++] = ph;
    }
    for (int k = 0; k < n_order; k++) {
        Phase ph = (Phase)order[k];
        int first = -1, last = -1, peak = -1;
        for (int i = lo; i < hi; i++) {
            if (span_phase(p, r->samples[i].op) != (int)ph) continue;
            if (first < 0) first = i;
            last = i;
            if (peak < 0 || r->samples[i].allocated > r->samples[peak].allocated) peak = i;
        }
        if (first < 0) continue;
        const MemSample *s0 = first > 0 ? &r->samples[first - 1] : &r->samples[first];
        const MemSample *s1 = &r->samples[last];
        const MemSample *sp = &r->samples[peak];
        double d = (double)s1->allocated - (double)s0->allocated;
        fprintf(f, "  %s (%.1f to %.1f ms): ", phase_name(ph), s0->t_ns / 1e6, s1->t_ns / 1e6);
        if (d > -1048576.0 && d < 1048576.0)
            fprintf(f, "allocated ends where it started, at %s", sz(a, (double)s1->allocated));
        else
            fprintf(f, "allocated %s %s to %s", d >= 0 ? "grows from" : "falls from",
                    sz(a, (double)s0->allocated), sz(b, (double)s1->allocated));
        if (sp->allocated > s1->allocated && sp->allocated > s0->allocated)
            fprintf(f, ", passing %s after op '%s'", sz(c, (double)sp->allocated),
                    graph_op_c(p->graph, sp->op)->name);
        fprintf(f, ".\n");
        /* the categories that moved most */
        int best = -1, worst = -1;
        double bd = 0, wd = 0;
        for (int cat = 0; cat < CAT_COUNT; cat++) {
            double dc = (double)s1->cat[cat] - (double)s0->cat[cat];
            if (dc > bd) { bd = dc; best = cat; }
            if (dc < wd) { wd = dc; worst = cat; }
        }
        bool grew = best >= 0 && bd >= 1048576.0, shrank = worst >= 0 && -wd >= 1048576.0;
        if (grew) fprintf(f, "    %s grew by %s", pretty_cat(best), sz(a, bd));
        if (shrank) fprintf(f, "%s%s shrank by %s", grew ? "; " : "    ", pretty_cat(worst), sz(b, wd));
        if (grew || shrank) fprintf(f, ".\n");
        switch (ph) {
        case PH_ZERO_GRAD:
            fprintf(f, "    zero_grad(set_to_none=True) drops the .grad buffers of the last step.\n");
            break;
        case PH_FWD:
            fprintf(f, "    Each op's output is allocated when the op starts; tensors that backward will\n"
                       "    need (saved for backward) stay alive, the rest are freed by their last user.\n");
            break;
        case PH_BWD:
            fprintf(f, "    Backward runs the ops in reverse: each frees the tensors its forward op saved,\n"
                       "    and allocates gradients (parameter .grad buffers stay until zero_grad).\n");
            break;
        case PH_RECOMPUTE:
            fprintf(f, "    Checkpointed regions run their forward again inside backward, one region at a\n"
                       "    time, so only one region's saved tensors are alive at once.\n");
            break;
        case PH_OPTIM:
            fprintf(f, "    The optimizer reads parameters, gradients and its state; the foreach\n"
                       "    implementation makes temporaries for a whole group of tensors at once.\n");
            break;
        default: break;
        }
    }
}

/* The largest single allocations of the step: the biggest jumps between consecutive samples. */
static void largest_jumps(FILE *f, const Plan *p, const SimResult *r, int lo, int hi) {
    enum { K = 5 };
    int idx[K];
    double val[K];
    int n = 0;
    for (int i = lo > 0 ? lo : 1; i < hi; i++) {
        const MemSample *m = &r->samples[i];
        double d = (double)m->allocated - (double)r->samples[i - 1].allocated;
        if (d <= 0) continue;
        int j = n < K ? n++ : K - 1;
        if (j == K - 1 && n == K && d <= val[K - 1]) continue;
        idx[j] = i;
        val[j] = d;
        while (j > 0 && val[j] > val[j - 1]) {
            double tv = val[j]; val[j] = val[j - 1]; val[j - 1] = tv;
            int ti = idx[j]; idx[j] = idx[j - 1]; idx[j - 1] = ti;
            j--;
        }
    }
    if (!n) return;
    char a[32];
    fprintf(f, "\n  The largest single allocations of the step:\n");
    for (int i = 0; i < n; i++) {
        const MemSample *m = &r->samples[idx[i]];
        int op = m->op;
        const char *name = op >= 0 && op < graph_num_ops(p->graph) ? graph_op_c(p->graph, op)->name : "?";
        fprintf(f, "    %10s  at %.2f ms, op '%s' (%s)\n", sz(a, val[i]), m->t_ns / 1e6, name,
                phase_name((Phase)span_phase(p, op)));
    }
}

static void explain_peak(FILE *f, const Plan *p, const SimResult *r, const StepResult *s) {
    char a[32], b[32], c[32];
    const Op *op = s->peak_op >= 0 && s->peak_op < graph_num_ops(p->graph) ? graph_op_c(p->graph, s->peak_op) : NULL;
    fprintf(f, "\nWhy the peak is where it is\n");
    fprintf(f, "  Allocated memory peaks at %s", sz(a, (double)s->peak_allocated));
    if (op) fprintf(f, ", when op '%s' allocates %s", op->name, phase_words(op->phase));
    fprintf(f, ". At that moment:\n");
    double total = 0;
    for (int cat = 0; cat < CAT_COUNT; cat++) total += (double)s->peak_breakdown[cat];
    int top = 0;
    for (int cat = 0; cat < CAT_COUNT; cat++) {
        if (s->peak_breakdown[cat] > s->peak_breakdown[top]) top = cat;
        if (s->peak_breakdown[cat] == 0) continue;
        fprintf(f, "    %-16s %10s  (%4.1f %%)\n", pretty_cat(cat), sz(a, (double)s->peak_breakdown[cat]),
                total > 0 ? 100.0 * (double)s->peak_breakdown[cat] / total : 0);
    }
    if (op) {
        switch (op->phase) {
        case PH_OPTIM:
            fprintf(f, "  The peak is in the optimizer step: parameters, their gradients and the optimizer\n"
                       "  state are all alive, and the update adds temporaries on top. Activations are\n"
                       "  already gone. A fused optimizer (optimizer_impl=fused) makes far fewer\n"
                       "  temporaries; LoRA or ZeRO shrink the state itself.\n");
            break;
        case PH_FWD:
            fprintf(f, "  The peak is in the forward pass: the activations saved for backward have piled\n"
                       "  up layer after layer. Checkpointing, a smaller micro-batch or a shorter sequence\n"
                       "  cut them.\n");
            break;
        case PH_BWD: case PH_RECOMPUTE:
            fprintf(f, "  The peak is in the backward pass: most saved activations are still alive while\n"
                       "  gradient buffers are being allocated. Checkpointing or a smaller micro-batch\n"
                       "  lowers the activations; %s\n",
                    top == CAT_ACTIVATION ? "here activations are the largest part." :
                    "here they are not the largest part, so the gain is limited.");
            break;
        default: break;
        }
    }
    if (r->n_live_at_peak > 0) {
        fprintf(f, "  The largest tensors alive at the peak (%d tensors in all):\n", r->n_live_at_peak);
        for (int i = 0; i < r->n_live_at_peak && i < 6; i++) {
            const Tensor *t = graph_tensor_c(p->graph, r->live_at_peak[i].tensor);
            fprintf(f, "    %10s  %-16s %s\n", sz(a, (double)r->live_at_peak[i].bytes), pretty_cat(t->cat), t->name);
        }
    }
    (void)b; (void)c;
}

/* Free bytes at the peak by the rule that left them: small pool, 20 MiB segments, others. */
static void explain_slack(FILE *f, const Plan *p, const SimResult *r, const StepResult *s) {
    char a[32], b[32], c[32];
    double slack = (double)s->peak_reserved - (double)s->peak_allocated;
    fprintf(f, "\nAllocator slack\n");
    if (p->alloc.kind == ALLOC_IDEAL) {
        fprintf(f, "  This run uses the ideal allocator (no caching, no fragmentation): reserved equals\n"
                   "  allocated, so there is no slack to explain.\n");
        return;
    }
    fprintf(f, "  PyTorch's caching allocator reserves memory from CUDA in segments and keeps freed\n"
               "  blocks cached for reuse instead of returning them. Peak reserved is %s, %s\n"
               "  more than peak allocated (%.1f %%).\n", sz(a, (double)s->peak_reserved), sz(b, slack),
            s->peak_allocated ? 100.0 * slack / (double)s->peak_allocated : 0);
    if (!r->n_segmap) return;
    double reserved = 0, fsmall = 0, f20 = 0, fbig = 0, largest_big = 0;
    int segs = 0, nfree = 0;
    for (size_t i = 0; i < r->n_segmap;) {
        size_t j = i;
        double seg = 0, free_here = 0;
        bool small = r->segmap[i].small_pool;
        while (j < r->n_segmap && r->segmap[j].segment_addr == r->segmap[i].segment_addr) {
            seg += (double)r->segmap[j].size;
            if (!r->segmap[j].allocated) { free_here += (double)r->segmap[j].size; nfree++; }
            j++;
        }
        segs++;
        reserved += seg;
        if (small) fsmall += free_here;
        else if (seg == 20971520.0 && !p->alloc.expandable_segments) f20 += free_here;
        else {
            fbig += free_here;
            for (size_t k = i; k < j; k++)
                if (!r->segmap[k].allocated && (double)r->segmap[k].size > largest_big) largest_big = (double)r->segmap[k].size;
        }
        i = j;
    }
    double ffree = fsmall + f20 + fbig;
    fprintf(f, "  At the moment of peak allocated it holds %d segment%s (%s) with %d cached free\n"
               "  block%s (%s); the largest free block is %s.\n", segs, segs == 1 ? "" : "s",
            sz(a, reserved), nfree, nfree == 1 ? "" : "s", sz(b, ffree), sz(c, (double)r->largest_free_at_peak));
    if (fsmall >= 1048576.0)
        fprintf(f, "  - %s free in small-pool segments: requests of 1 MiB or less share 2 MiB segments\n"
                   "    of their own pool (docs/allocator.md 2.1-2.2); partly used ones cannot be returned.\n",
                sz(a, fsmall));
    if (f20 >= 1048576.0)
        fprintf(f, "  - %s free in 20 MiB segments: a request under 10 MiB gets a whole 20 MiB segment\n"
                   "    (2.2) and the rest waits for other requests of that size.\n", sz(a, f20));
    if (fbig >= 1048576.0) {
        fprintf(f, "  - %s free inside larger segments: blocks freed earlier and cached. A request is\n"
                   "    served from the smallest free block that fits (best fit, 3.1); segments never\n"
                   "    merge (4.4), so free space scattered over segments cannot serve one larger\n"
                   "    request (largest such free block: %s), and the allocator cudaMallocs a new\n"
                   "    segment instead.\n", sz(a, fbig), sz(b, largest_big));
        if (!p->alloc.expandable_segments)
            fprintf(f, "    expandable_segments:True (--alloc-conf) grows one segment per stream by\n"
                       "    mapping pages, which usually removes most of this.\n");
    }
    if (slack > ffree + 1048576.0)
        fprintf(f, "  Peak reserved (%s) is above what was reserved at the peak-allocated moment (%s):\n"
                   "  reserved reached its peak at another moment and cached segments are only\n"
                   "  returned to CUDA when an allocation fails (5.6) or empty_cache() is called.\n",
                sz(a, (double)s->peak_reserved), sz(b, reserved));
}

static void explain_oom(FILE *f, const Plan *p, const SimResult *r, const Diagnosis *dg) {
    char a[32], b[32], c[32], d[32];
    const Op *op = r->oom_op >= 0 && r->oom_op < graph_num_ops(p->graph) ? graph_op_c(p->graph, r->oom_op) : NULL;
    fprintf(f, "\nWhy it does not fit\n");
    fprintf(f, "  PyTorch would raise OutOfMemoryError %s", r->oom_step < 0 ? "while building the model" : "");
    if (r->oom_step >= 0) fprintf(f, "in step %d", r->oom_step);
    if (op) fprintf(f, ", when op '%s' (%s) asks for %s", op->name, phase_name(op->phase), sz(a, (double)r->oom_info.requested));
    else fprintf(f, ", asking for %s", sz(a, (double)r->oom_info.requested));
    fprintf(f, ".\n  Capacity %s: %s allocated by PyTorch, %s reserved but unallocated, %s never reserved.\n",
            sz(b, (double)r->oom_info.capacity), sz(c, (double)r->oom_info.allocated),
            sz(d, (double)r->oom_info.reserved_unallocated), sz(a, (double)r->oom_info.free));
    /* the failing request is where the run stopped, not why: the cause is what the same graph
     * holds when nothing stops it (diagnose.h) */
    if (dg && dg->cause != OOM_NONE) {
        fprintf(f, "  The same step simulated without a memory limit and without fragmentation shows\n"
                   "  the cause:\n");
        diagnose_print(f, p, dg, "  ");
    }
    if (r->oom_step >= 1 && (!dg || dg->cause != OOM_FRAGMENTATION))
        fprintf(f, "  It failed in step %d, not step 0: the optimizer state created in step 0 stays\n"
                   "  allocated and the following step no longer has room.\n", r->oom_step);
}

void explain_print(FILE *f, const Plan *p, const SimResult *r, const Diagnosis *d) {
    char a[32], b[32];
    const StepResult *s = report_step(r);
    int step = r->oom ? r->oom_step : r->n_steps - 1;
    fprintf(f, "\nWhat happens in a training step: %s on %s\n", p->model, p->dev.name);
    fprintf(f, "  %s\n", p->settings);
    if (r->oom && r->oom_step < 0) {
        explain_oom(f, p, r, d);
        return;
    }
    fprintf(f, "\nBefore the first step\n");
    fprintf(f, "  Building the model (and its optimizer) leaves %s allocated, %s reserved.\n",
            sz(a, (double)r->build_allocated), sz(b, (double)r->build_reserved));
    if (r->n_steps > 1 && !r->oom)
        fprintf(f, "  Step 0 peaks at %s allocated; it also creates the optimizer state, which then\n"
                   "  stays allocated in every later step. The steady state is step %d.\n",
                sz(a, (double)r->steps[0].peak_allocated), step);

    if (s) {
        fprintf(f, "\nStep %d, phase by phase%s\n", step, r->oom ? " (the step that fails)" : "");
        int lo, hi;
        if (r->n_samples == 0) {
            fprintf(f, "  (the run kept no timeline, so the phases cannot be walked through)\n");
        } else if (step_samples(p, r, step, &lo, &hi)) {
            walk_phases(f, p, r, lo, hi);
            largest_jumps(f, p, r, lo, hi);
        }
    }
    if (s && !r->oom) explain_peak(f, p, r, s);
    if (r->oom) explain_oom(f, p, r, d);
    if (s && !r->oom) explain_slack(f, p, r, s);
    fprintf(f, "\n");
}
