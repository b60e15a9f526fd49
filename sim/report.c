/* report.c: terminal summary, summary.json (cJSON), memory.csv and trace.json, and the output
 * set's staging directory. */
#define _GNU_SOURCE /* renameat2 (RENAME_EXCHANGE) */
#include "report.h"

#include "outpath.h"
#include "safetext.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIB(x) ((double)(x) / 1048576.0)
#define GIB(x) ((double)(x) / 1073741824.0)

const StepResult *report_step(const SimResult *r) {
    if (r->oom) return r->oom_step >= 0 ? &r->steps[r->oom_step] : NULL;
    if (r->n_steps > 0) return &r->steps[r->n_steps - 1];
    return NULL;
}

bool report_fits(const SimResult *r) { return !r->oom; }

int report_worst_step(const SimResult *r) {
    int w = -1;
    for (int i = 0; i < r->n_steps; i++)
        if (w < 0 || r->steps[i].peak_reserved >= r->steps[w].peak_reserved) w = i; /* ties: the later */
    return w;
}

uint64_t report_alloc_retries(const SimResult *r) {
    int n = r->n_steps + (r->oom && r->oom_step >= 0 ? 1 : 0);
    return n > 0 ? r->steps[n - 1].num_alloc_retries : 0; /* cumulative, as torch counts them */
}

/* Where the op costs came from, for the step-time label. */
const char *report_cost_source(const Plan *p) {
    return p->cost ? p->profile : "roofline on datasheet figures, no calibrated profile";
}

/* Sum of parameter elements per top-level module ("model.layers.3.mlp.up_proj.weight" counts
 * under "model.layers", "lm_head.weight" under "lm_head"). */
typedef struct ModCount {
    const char *name;          /* the module's name: the first len bytes of a tensor's name */
    size_t len;                /* (the graph's, valid while it lives) */
    double n;                  /* parameter elements */
} ModCount;

static int module_counts(const Graph *g, ModCount *out, int max) {
    int n = 0;
    for (int t = 0; t < graph_num_tensors(g); t++) {
        const Tensor *x = graph_tensor_c(g, t);
        if (!x->is_param || x->producer >= 0) continue; /* count each parameter once (as built) */
        const char *nm = x->name;
        const char *a = strchr(nm, '.');
        const char *b = a ? strchr(a + 1, '.') : NULL;
        size_t len = b && strncmp(nm, "model.", 6) == 0 ? (size_t)(b - nm) : (a ? (size_t)(a - nm) : strlen(nm));
        if (strstr(nm, "lora_")) { nm = "lora_adapters"; len = strlen(nm); }
        /* the whole module name: two long ones that share a prefix stay apart */
        int i;
        for (i = 0; i < n; i++) if (out[i].len == len && memcmp(out[i].name, nm, len) == 0) break;
        if (i == n) {
            if (n == max) continue;
            out[n].name = nm;
            out[n].len = len;
            out[n++].n = 0;
        }
        out[i].n += (double)x->numel;
    }
    return n;
}

static double slack_bytes(const StepResult *s) {
    return (double)s->peak_reserved - (double)s->peak_allocated;
}

static void print_summary(FILE *f, const Plan *p, const SimResult *r);

/* The summary is built whole, then written with the names in it (the title, modules, tensors,
 * ops: the scenario's text) made safe for a terminal (safetext.h). */
void report_print_summary(FILE *f, const Plan *p, const SimResult *r) {
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) {
        fputs("vrsim: out of host memory\n", stderr);
        return;
    }
    print_summary(m, p, r);
    if (fclose(m) == 0) safetext_fputs(f, text);
    else fputs("vrsim: out of host memory\n", stderr);
    free(text);
}

static void print_summary(FILE *f, const Plan *p, const SimResult *r) {
    const StepResult *s = report_step(r);
    uint64_t cap = p->alloc.capacity;
    fprintf(f, "vrsim: %s\n", p->name);
    if (p->title[0]) fprintf(f, "  %s\n", p->title);
    if (p->overrides[0]) fprintf(f, "  with --set %s\n", p->overrides);
    fprintf(f, "  %s on %s%s (%d GPU%s)\n", p->model, p->dev.name, "", p->gpus,
            p->gpus == 1 ? "" : "s");
    fprintf(f, "  %s\n\n", p->settings);
    if (r->oom && r->oom_step < 0) {
        fprintf(f, "DOES NOT FIT: CUDA out of memory while building the model (at '%s')\n",
                r->oom_op >= 0 ? graph_op_c(p->graph, r->oom_op)->name : "parameters");
    } else if (r->oom) {
        fprintf(f, "DOES NOT FIT: CUDA out of memory in step %d at op '%s'\n", r->oom_step,
                r->oom_op >= 0 ? graph_op_c(p->graph, r->oom_op)->name : "(build)");
    } else {
        /* the verdict is the worst step's: step 0 (optimizer state appearing) may hold more than
         * the steady state */
        int w = report_worst_step(r);
        const StepResult *ws = w >= 0 ? &r->steps[w] : s;
        fprintf(f, "FITS: peak reserved %.2f GiB of %.2f GiB usable (%.1f %%), %.2f GiB headroom",
                GIB(ws->peak_reserved), GIB(cap), cap ? 100.0 * (double)ws->peak_reserved / (double)cap : 0,
                GIB(cap > ws->peak_reserved ? cap - ws->peak_reserved : 0));
        if (w >= 0 && w != r->n_steps - 1) fprintf(f, ", at step %d (its worst)", w);
        fprintf(f, "\n");
        if (p->managed_bytes > 0 && s) {
            /* (a run that fits) unified memory outside the allocator: the device holds it beside the reserve */
            uint64_t out = (uint64_t)p->managed_bytes - s->managed_resident;
            fprintf(f, "  paged optimizer state %.2f GiB in unified memory, outside reserved: %.2f GiB on the card "
                    "(device total %.2f GiB of %.2f GiB with the CUDA context)",
                    GIB(p->managed_bytes), GIB(s->managed_resident),
                    GIB(s->peak_reserved + s->managed_resident + p->dev.context_bytes), GIB(p->dev.total_bytes));
            if (out) fprintf(f, ", %.2f GiB evicted to the host and paged back each step (+%.1f ms)",
                             GIB(out), s->managed_ns / 1e6);
            fprintf(f, "\n");
        }
        uint64_t retries = report_alloc_retries(r);
        if (retries > 0)
            fprintf(f, "  fits only after the allocator freed its cache and retried, %llu time%s\n",
                    (unsigned long long)retries, retries == 1 ? "" : "s");
    }
    if (r->oom)
        fprintf(f, "  tried to allocate %.2f MiB; capacity %.2f GiB, %.2f GiB allocated by "
                "PyTorch, %.2f GiB reserved but unallocated\n", MIB(r->oom_info.requested),
                GIB(r->oom_info.capacity), GIB(r->oom_info.allocated),
                GIB(r->oom_info.reserved_unallocated));
    if (!s) return;
    fprintf(f, "\n  step %d%s          allocated      reserved\n", r->oom ? r->oom_step : r->n_steps - 1,
            r->oom ? " (failed)" : " (steady)");
    fprintf(f, "  peak               %9.1f MiB  %9.1f MiB\n", MIB(s->peak_allocated), MIB(s->peak_reserved));
    fprintf(f, "  after forward      %9.1f MiB\n", MIB(s->fwd_peak_allocated));
    fprintf(f, "  after backward     %9.1f MiB\n", MIB(s->bwd_peak_allocated));
    if (r->n_steps > 1 && !r->oom)
        fprintf(f, "  step 0 peak        %9.1f MiB  %9.1f MiB   (first step: optimizer state appears)\n",
                MIB(r->steps[0].peak_allocated), MIB(r->steps[0].peak_reserved));
    if (r->oom) {
        /* the moment of the OOM: what was live when the allocation failed */
        fprintf(f, "\n  breakdown at the out-of-memory error\n");
        for (int c = 0; c < CAT_COUNT; c++)
            fprintf(f, "    %-18s %9.1f MiB\n", category_name((Category)c), MIB(r->oom_breakdown[c]));
        fprintf(f, "    %-18s %9.1f MiB   (reserved but unallocated)\n", "allocator_slack",
                MIB(r->oom_info.reserved_unallocated));
    } else {
        fprintf(f, "\n  breakdown at peak allocated\n");
        for (int c = 0; c < CAT_COUNT; c++)
            fprintf(f, "    %-18s %9.1f MiB\n", category_name((Category)c), MIB(s->peak_breakdown[c]));
        fprintf(f, "    %-18s %9.1f MiB   (reserved - allocated at peak)\n", "allocator_slack",
                MIB(slack_bytes(s)));
    }
    fprintf(f, "    %-18s %9.1f MiB   (outside the allocator)\n", "cuda_context",
            MIB(p->dev.context_bytes));
    if (s->peak_op >= 0 && !r->oom)
        fprintf(f, "    peak reached at op '%s' (%s)\n", graph_op_c(p->graph, s->peak_op)->name,
                phase_name(graph_op_c(p->graph, s->peak_op)->phase));
    if (r->n_live_at_peak) {
        fprintf(f, "\n  largest live tensors %s\n", r->oom ? "at the out-of-memory error" : "at peak");
        for (int i = 0; i < r->n_live_at_peak && i < 8; i++) {
            const Tensor *t = graph_tensor_c(p->graph, r->live_at_peak[i].tensor);
            fprintf(f, "    %9.1f MiB  %-12s %s\n", MIB(r->live_at_peak[i].bytes),
                    category_name(t->cat), t->name);
        }
    }
    if (s->time_ns > 0) {
        double ms = s->time_ns / 1e6;
        fprintf(f, "\n  step time %.1f ms (%s)", ms, report_cost_source(p));
        if (p->tokens_per_step > 0)
            fprintf(f, ", %.0f tokens/s per GPU, %.0f for the job", p->tokens_per_step / (ms / 1e3),
                    p->gpus * p->tokens_per_step / (ms / 1e3));
        fprintf(f, "\n");
        /* which side sets the pace: a step whose host dispatch outlasts its GPU compute moves
         * with the host CPU's speed, which vrsim takes from the calibrated host */
        if (s->host_ns > 0)
            fprintf(f, "    bound by the %s: the host spends %.1f ms dispatching ops, the GPU %.1f ms "
                    "computing%s\n", s->host_ns > s->stream_busy_ns[0] ? "host" : "GPU",
                    s->host_ns / 1e6, s->stream_busy_ns[0] / 1e6,
                    s->host_ns > s->stream_busy_ns[0] ? " (it moves with the host CPU's speed)" : "");
        double comp = s->stream_busy_ns[0], comm = s->stream_busy_ns[1] + s->stream_busy_ns[4] + s->stream_busy_ns[5];
        double copy = s->stream_busy_ns[2] + s->stream_busy_ns[3];
        if (comm > 0 || copy > 0) {
            double exposed = s->time_ns - comp;
            if (exposed < 0) exposed = 0;
            fprintf(f, "    compute %.1f ms, communication %.1f ms (%.0f %% of it hidden under "
                    "compute), host copies %.1f ms\n", comp / 1e6, comm / 1e6,
                    comm > 0 ? 100.0 * (1.0 - (exposed < comm ? exposed : comm) / comm) : 100.0,
                    copy / 1e6);
        }
    }
    if (p->gpus > 1 || strcmp(p->strategy, "none") != 0) {
        fprintf(f, "\n  %d GPUs (%s over %s): every rank as above; the job holds %.1f GiB of GPU "
                "memory at peak\n", p->gpus, p->strategy, p->interconnect[0] ? p->interconnect : "-",
                GIB(s->peak_reserved) * p->gpus);
        if (p->ds_estimate_bytes > 0)
            fprintf(f, "  DeepSpeed's estimator (model states only): %.1f GiB per GPU; simulated "
                    "model states %.1f GiB, plus activations, buffers and allocator slack\n",
                    GIB(p->ds_estimate_bytes),
                    GIB(s->peak_breakdown[CAT_PARAM] + s->peak_breakdown[CAT_GRAD] +
                        s->peak_breakdown[CAT_OPTSTATE]));
        if (p->host_bytes > 0)
            fprintf(f, "  host memory for offloaded state: %.1f GiB per GPU\n", GIB(p->host_bytes));
    }
    if (p->deepspeed_read[0]) fprintf(f, "\n  DeepSpeed config read: %s\n", p->deepspeed_read);
    if (p->deepspeed_unknown[0])
        fprintf(f, "  DeepSpeed config keys DeepSpeed does not know (ignored, as it ignores them): %s\n",
                p->deepspeed_unknown);
    if (p->alloc_conf_from_env)
        fprintf(f, "  allocator settings from PYTORCH_CUDA_ALLOC_CONF in the environment: %s\n", p->alloc_conf);
    if (p->notes[0]) fprintf(f, "  notes: %s\n", p->notes);
}

static cJSON *step_json(const StepResult *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "peak_allocated_bytes", (double)s->peak_allocated);
    cJSON_AddNumberToObject(o, "peak_reserved_bytes", (double)s->peak_reserved);
    cJSON_AddNumberToObject(o, "fwd_peak_allocated_bytes", (double)s->fwd_peak_allocated);
    cJSON_AddNumberToObject(o, "bwd_peak_allocated_bytes", (double)s->bwd_peak_allocated);
    cJSON_AddNumberToObject(o, "end_allocated_bytes", (double)s->end_allocated);
    cJSON_AddNumberToObject(o, "end_reserved_bytes", (double)s->end_reserved);
    cJSON_AddNumberToObject(o, "step_time_ms", s->time_ns / 1e6);
    cJSON_AddNumberToObject(o, "num_alloc_retries", (double)s->num_alloc_retries);
    cJSON_AddNumberToObject(o, "num_cuda_mallocs", (double)s->num_cuda_mallocs);
    return o;
}

char *report_summary_json(const Plan *p, const SimResult *r) {
    const StepResult *s = report_step(r);
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "scenario", p->name);
    cJSON_AddStringToObject(o, "model", p->model);
    cJSON_AddStringToObject(o, "gpu", p->dev.key);
    cJSON_AddStringToObject(o, "step_time_basis", p->cost ? p->profile : "roofline on datasheet figures");
    cJSON_AddBoolToObject(o, "fits", !r->oom);
    cJSON_AddNumberToObject(o, "capacity_bytes", (double)p->alloc.capacity);
    cJSON_AddNumberToObject(o, "peak_allocated_bytes", s ? (double)s->peak_allocated : 0);
    cJSON_AddNumberToObject(o, "peak_reserved_bytes", s ? (double)s->peak_reserved : 0);
    cJSON_AddNumberToObject(o, "step_time_ms", s ? s->time_ns / 1e6 : 0);
    cJSON_AddNumberToObject(o, "gpus", p->gpus);
    cJSON_AddStringToObject(o, "strategy", p->strategy);
    if (p->ds_estimate_bytes > 0)
        cJSON_AddNumberToObject(o, "deepspeed_estimate_model_states_bytes", p->ds_estimate_bytes);
    if (p->managed_bytes > 0 && s && !r->oom) {
        /* the paged optimizer state: unified memory, not in peak_reserved_bytes */
        cJSON *mo = cJSON_AddObjectToObject(o, "paged_state");
        cJSON_AddNumberToObject(mo, "bytes", p->managed_bytes);
        cJSON_AddNumberToObject(mo, "resident_bytes", (double)s->managed_resident);
        cJSON_AddNumberToObject(mo, "evicted_bytes", p->managed_bytes - (double)s->managed_resident);
        cJSON_AddNumberToObject(mo, "device_total_bytes",
                                (double)(s->peak_reserved + s->managed_resident + p->dev.context_bytes));
        cJSON_AddNumberToObject(mo, "transfer_ms", s->managed_ns / 1e6);
    }
    if (s) {
        cJSON *tm = cJSON_AddObjectToObject(o, "time_ms");
        cJSON_AddNumberToObject(tm, "compute", s->stream_busy_ns[0] / 1e6);
        cJSON_AddNumberToObject(tm, "host_dispatch", s->host_ns / 1e6);
        /* the host's dispatch by the phase of the step a training loop times on the host
         * (measure_sdxl_steps.py's host_ms): the forward; backward() with the recomputation
         * inside it; step() and zero_grad() */
        cJSON *hp = cJSON_AddObjectToObject(tm, "host_dispatch_by_phase");
        cJSON_AddNumberToObject(hp, "forward", s->host_phase_ns[PH_FWD] / 1e6);
        cJSON_AddNumberToObject(hp, "backward", (s->host_phase_ns[PH_BWD] + s->host_phase_ns[PH_RECOMPUTE]) / 1e6);
        cJSON_AddNumberToObject(hp, "optimizer", (s->host_phase_ns[PH_OPTIM] + s->host_phase_ns[PH_ZERO_GRAD]) / 1e6);
        cJSON_AddNumberToObject(tm, "communication", (s->stream_busy_ns[1] + s->stream_busy_ns[4] + s->stream_busy_ns[5]) / 1e6);
        cJSON_AddNumberToObject(tm, "host_to_device", s->stream_busy_ns[2] / 1e6);
        cJSON_AddNumberToObject(tm, "device_to_host", s->stream_busy_ns[3] / 1e6);
    }
    if (p->gpus > 1 && s) {
        cJSON *pg = cJSON_AddArrayToObject(o, "per_gpu");
        for (int g = 0; g < p->gpus; g++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "rank", g);
            cJSON_AddNumberToObject(e, "peak_allocated_bytes", (double)s->peak_allocated);
            cJSON_AddNumberToObject(e, "peak_reserved_bytes", (double)s->peak_reserved);
            cJSON_AddItemToArray(pg, e);
        }
    }
    if (s && s->time_ns > 0 && p->tokens_per_step > 0)
        cJSON_AddNumberToObject(o, "tokens_per_s", p->tokens_per_step * p->gpus / (s->time_ns / 1e9));
    cJSON *bd = cJSON_AddObjectToObject(o, "breakdown_at_peak");
    for (int c = 0; s && c < CAT_COUNT; c++)
        cJSON_AddNumberToObject(bd, category_name((Category)c), (double)s->peak_breakdown[c]);
    if (s) cJSON_AddNumberToObject(bd, "allocator_slack", slack_bytes(s));
    cJSON_AddNumberToObject(bd, "cuda_context", (double)p->dev.context_bytes);
    ModCount mc[64];
    int nm = module_counts(p->graph, mc, 64);
    cJSON *pm = cJSON_AddObjectToObject(o, "parameters");
    for (int i = 0; i < nm; i++) {
        char *key = vr_strfmt("%.*s", (int)mc[i].len, mc[i].name);
        if (key) cJSON_AddNumberToObject(pm, key, mc[i].n);
        free(key);
    }
    /* the base model's parameters (before adapters) and those that train, whole tensors */
    if (p->n_params >= 0) cJSON_AddNumberToObject(o, "n_params", (double)p->n_params);
    if (p->n_trainable >= 0) cJSON_AddNumberToObject(o, "n_trainable", (double)p->n_trainable);
    cJSON *steps = cJSON_AddArrayToObject(o, "steps");
    int n = r->n_steps + (r->oom && r->oom_step >= 0 ? 1 : 0);
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(steps, step_json(&r->steps[i]));
    int w = report_worst_step(r);
    if (w >= 0) {
        cJSON *wo = cJSON_AddObjectToObject(o, "worst_step");
        cJSON_AddNumberToObject(wo, "step", w);
        cJSON_AddNumberToObject(wo, "peak_allocated_bytes", (double)r->steps[w].peak_allocated);
        cJSON_AddNumberToObject(wo, "peak_reserved_bytes", (double)r->steps[w].peak_reserved);
        double cap = (double)p->alloc.capacity, pr = (double)r->steps[w].peak_reserved;
        cJSON_AddNumberToObject(o, "headroom_bytes", r->oom ? 0 : (cap > pr ? cap - pr : 0));
    }
    cJSON_AddNumberToObject(o, "num_alloc_retries", (double)report_alloc_retries(r));
    cJSON_AddStringToObject(o, "step_time_source", report_cost_source(p));
    if (p->title[0]) cJSON_AddStringToObject(o, "title", p->title);
    if (p->overrides[0]) cJSON_AddStringToObject(o, "overrides", p->overrides);
    cJSON_AddStringToObject(o, "alloc_conf", p->alloc_conf);
    cJSON_AddStringToObject(o, "alloc_conf_source", p->alloc_conf_from_env ? "environment" : "scenario");
    cJSON *notes = cJSON_AddArrayToObject(o, "notes");
    for (const char *q = p->notes; *q;) {
        const char *e = strstr(q, "; ");
        size_t len = e ? (size_t)(e - q) : strlen(q);
        char *one = malloc(len + 1);
        if (one) { memcpy(one, q, len); one[len] = 0; cJSON_AddItemToArray(notes, cJSON_CreateString(one)); free(one); }
        q += len + (e ? 2 : 0);
    }
    if (p->deepspeed_read[0]) {
        cJSON *ds = cJSON_AddObjectToObject(o, "deepspeed");
        cJSON_AddStringToObject(ds, "read", p->deepspeed_read);
        cJSON *uk = cJSON_AddArrayToObject(ds, "unknown_keys");
        for (const char *q = p->deepspeed_unknown; *q;) {
            const char *e = strstr(q, ", ");
            size_t len = e ? (size_t)(e - q) : strlen(q);
            char *one = malloc(len + 1);
            if (one) { memcpy(one, q, len); one[len] = 0; cJSON_AddItemToArray(uk, cJSON_CreateString(one)); free(one); }
            q += len + (e ? 2 : 0);
        }
    }
    if (r->oom) {
        cJSON *oo = cJSON_AddObjectToObject(o, "oom");
        cJSON *ob = cJSON_AddObjectToObject(oo, "breakdown");
        for (int c = 0; c < CAT_COUNT; c++)
            cJSON_AddNumberToObject(ob, category_name((Category)c), (double)r->oom_breakdown[c]);
        cJSON_AddNumberToObject(ob, "allocator_slack", (double)r->oom_info.reserved_unallocated);
        cJSON_AddNumberToObject(oo, "step", r->oom_step);
        cJSON_AddStringToObject(oo, "op", r->oom_op >= 0 ? graph_op_c(p->graph, r->oom_op)->name : "build");
        cJSON_AddNumberToObject(oo, "requested_bytes", (double)r->oom_info.requested);
        cJSON_AddNumberToObject(oo, "allocated_bytes", (double)r->oom_info.allocated);
        cJSON_AddNumberToObject(oo, "reserved_unallocated_bytes", (double)r->oom_info.reserved_unallocated);
    }
    /* live_at_peak: the last completed step's peak, or after an OOM the failing moment */
    cJSON_AddStringToObject(o, "live_at", r->oom ? "oom" : "peak");
    cJSON *live = cJSON_AddArrayToObject(o, "live_at_peak");
    for (int i = 0; i < r->n_live_at_peak && i < 20; i++) {
        cJSON *t = cJSON_CreateObject();
        const Tensor *x = graph_tensor_c(p->graph, r->live_at_peak[i].tensor);
        cJSON_AddStringToObject(t, "name", x->name);
        cJSON_AddStringToObject(t, "category", category_name(x->cat));
        cJSON_AddNumberToObject(t, "bytes", (double)r->live_at_peak[i].bytes);
        cJSON_AddItemToArray(live, t);
    }
    cJSON *sm = cJSON_AddObjectToObject(o, "segments_at_peak");
    size_t segs = 0, freeb = 0;
    for (size_t i = 0; i < r->n_segmap; i++) {
        if (i == 0 || r->segmap[i].segment_addr != r->segmap[i - 1].segment_addr) segs++;
        if (!r->segmap[i].allocated) freeb++;
    }
    cJSON_AddNumberToObject(sm, "segments", (double)segs);
    cJSON_AddNumberToObject(sm, "free_blocks", (double)freeb);
    cJSON_AddNumberToObject(sm, "largest_free_block_bytes", (double)r->largest_free_at_peak);
    char *raw = cJSON_Print(o);
    cJSON_Delete(o);
    /* the scenario's text (a title, names) as valid UTF-8: a byte that is not becomes U+FFFD */
    char *text = raw ? safetext_utf8(raw, strlen(raw), NULL) : NULL;
    free(raw);
    return text;
}

VrStatus report_write_file(const char *path, const char *text, size_t len, char *err, size_t errlen) {
    /* only over a regular file: never through a link or into a device or FIFO */
    VrStatus cst = outpath_check_file(path, "cannot write", NULL, NULL, err, errlen);
    if (cst) return cst;
    size_t tn = strlen(path) + 32;
    char *tmp = malloc(tn);
    if (!tmp) return VR_ENOMEM;
    snprintf(tmp, tn, "%s.tmp.%ld", path, (long)getpid());
    unlink(tmp); /* one of an earlier process of this pid */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        if (fd >= 0) { close(fd); unlink(tmp); }
        free(tmp);
        return VR_EIO;
    }
    size_t w = fwrite(text, 1, len, f);
    int bad = w != len || fflush(f) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return VR_EIO;
    }
    free(tmp);
    return VR_OK;
}

/* A growable text buffer. */
typedef struct Buf { char *p; size_t n, cap; bool bad; } Buf;

static void bprintf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static void bprintf(Buf *b, const char *fmt, ...) {
    if (b->bad) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) { b->bad = true; return; }
        if (b->p && b->n + (size_t)k < b->cap) { b->n += (size_t)k; return; }
        size_t ncap = b->cap ? b->cap * 2 : 65536;
        while (ncap < b->n + (size_t)k + 1) ncap *= 2;
        char *np = realloc(b->p, ncap);
        if (!np) { b->bad = true; return; }
        b->p = np;
        b->cap = ncap;
    }
}

/* Room for n more bytes (and a terminating NUL) in b; false when out of memory. */
static inline bool breserve(Buf *b, size_t n) {
    if (b->bad) return false;
    if (b->p && b->n + n < b->cap) return true;
    size_t ncap = b->cap ? b->cap * 2 : 65536;
    while (ncap < b->n + n + 1) ncap *= 2;
    char *np = realloc(b->p, ncap);
    if (!np) { b->bad = true; return false; }
    b->p = np;
    b->cap = ncap;
    return true;
}

static inline void bputn(Buf *b, const char *s, size_t n) {
    if (!breserve(b, n)) return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static inline void bputs(Buf *b, const char *s) { bputn(b, s, strlen(s)); }

static void bputc(Buf *b, char c) { bputn(b, &c, 1); }

static void bput_u64(Buf *b, unsigned long long v) {
    char d[24];
    int k = sizeof d;
    do { d[--k] = (char)('0' + v % 10); v /= 10; } while (v);
    bputn(b, d + k, sizeof d - (size_t)k);
}

size_t report_format_fixed(char out[32], double x, int decimals) {
    static const double POW10[] = {1, 10, 100, 1e3, 1e4, 1e5, 1e6};
    if (decimals < 0 || decimals > 6) decimals = decimals < 0 ? 0 : 6;
    double scaled = x * POW10[decimals];
    double frac = scaled - floor(scaled);
    /* where the product's rounding error could decide (a scaled fraction near one half), and for
     * negative, huge or non-finite values, printf itself */
    if (!(x >= 0) || signbit(x) || !(scaled < 9e15) ||
        fabs(frac - 0.5) < 1e-6 + scaled * 4.5e-16)
        return (size_t)snprintf(out, 32, "%.*f", decimals, x);
    unsigned long long n = (unsigned long long)(frac > 0.5 ? floor(scaled) + 1 : floor(scaled));
    unsigned long long p = (unsigned long long)POW10[decimals];
    char d[24];
    int k = sizeof d;
    unsigned long long f = n % p;
    for (int i = 0; i < decimals; i++) { d[--k] = (char)('0' + f % 10); f /= 10; }
    if (decimals) d[--k] = '.';
    unsigned long long w = n / p;
    do { d[--k] = (char)('0' + w % 10); w /= 10; } while (w);
    size_t len = sizeof d - (size_t)k;
    memcpy(out, d + k, len);
    out[len] = 0;
    return len;
}

static void bput_fixed(Buf *b, double x, int decimals) {
    char t[32];
    bputn(b, t, report_format_fixed(t, x, decimals));
}

static void json_escape(Buf *b, const char *s) {
    const char *run = s; /* the characters since the last escape, copied in one piece */
    for (; *s; s++) {
        if (*s != '"' && *s != '\\' && (unsigned char)*s >= 0x20) continue;
        bputn(b, run, (size_t)(s - run));
        if (*s == '"' || *s == '\\') { bputc(b, '\\'); bputc(b, *s); }
        else bprintf(b, "\\u%04x", *s);
        run = s + 1;
    }
    bputn(b, run, (size_t)(s - run));
}

/* A CSV field: quoted, with quotes doubled (RFC 4180). */
static void csv_field(Buf *b, const char *s) {
    bputc(b, '"');
    const char *run = s; /* the characters since the last one changed, copied in one piece */
    for (; *s; s++) {
        if (*s != '"' && *s != '\n' && *s != '\r') continue;
        bputn(b, run, (size_t)(s - run));
        if (*s == '"') bputs(b, "\"\"");
        else bputc(b, ' ');
        run = s + 1;
    }
    bputn(b, run, (size_t)(s - run));
    bputc(b, '"');
}

/* memory.csv: one row per memory sample, with the op that caused it and its phase. */
static void write_memory_csv(Buf *b, const Plan *p, const SimResult *r) {
    bprintf(b, "time_ms,allocated_bytes,reserved_bytes");
    for (int c = 0; c < CAT_COUNT; c++) bprintf(b, ",%s_bytes", category_name((Category)c));
    bprintf(b, ",op,phase\n");
    for (int i = 0; i < r->n_samples; i++) {
        const MemSample *m = &r->samples[i];
        bput_fixed(b, m->t_ns / 1e6, 6);
        bputc(b, ',');
        bput_u64(b, (unsigned long long)m->allocated);
        bputc(b, ',');
        bput_u64(b, (unsigned long long)m->reserved);
        for (int c = 0; c < CAT_COUNT; c++) {
            bputc(b, ',');
            bput_u64(b, (unsigned long long)m->cat[c]);
        }
        const Op *op = m->op >= 0 && m->op < graph_num_ops(p->graph) ? graph_op_c(p->graph, m->op) : NULL;
        bputc(b, ',');
        csv_field(b, op ? op->name : "(build)");
        bputc(b, ',');
        bputs(b, op ? phase_name(op->phase) : "build");
        bputc(b, '\n');
    }
}

static void write_trace_json(Buf *b, const Plan *p, const SimResult *r) {
    bprintf(b, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    bprintf(b, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"GPU 0 (%s)\"}},\n",
            p->dev.key);
    static const char *const threads[STREAM_COUNT] = {
        "compute", "collectives (NCCL)", "copies host-to-device", "copies device-to-host",
        "collectives (reduce-scatter stream)", "collectives (symmetric memory)"};
    for (int k = 0; k < STREAM_COUNT; k++)
        bprintf(b, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                k ? ",\n" : "", k, threads[k]);
    for (int i = 0; i < r->n_spans; i++) {
        const OpSpan *s = &r->spans[i];
        const Op *op = graph_op_c(p->graph, s->op);
        bputs(b, ",\n{\"name\":\"");
        json_escape(b, op->name);
        bputs(b, "\",\"cat\":\"");
        bputs(b, phase_name(op->phase));
        bputs(b, "\",\"ph\":\"X\",\"pid\":0,\"tid\":");
        bput_u64(b, (unsigned long long)s->stream);
        bputs(b, ",\"ts\":");
        bput_fixed(b, s->start_ns / 1e3, 3);
        bputs(b, ",\"dur\":");
        bput_fixed(b, (s->end_ns - s->start_ns) / 1e3, 3);
        bputs(b, ",\"args\":{\"step\":");
        bput_u64(b, (unsigned long long)s->step);
        bputs(b, ",\"kind\":\"");
        json_escape(b, op->kind);
        bputs(b, "\",\"flops\":");
        bput_fixed(b, op->flops, 0);
        bputs(b, ",\"bytes\":");
        bput_fixed(b, op->bytes_moved, 0);
        bputs(b, ",\"kernels\":");
        bput_u64(b, (unsigned long long)(op->kernels > 1 ? op->kernels : 1));
        bputs(b, "}}");
    }
    for (int i = 0; i < r->n_samples; i++) {
        const MemSample *m = &r->samples[i];
        bputs(b, ",\n{\"name\":\"memory (MiB)\",\"ph\":\"C\",\"pid\":0,\"ts\":");
        bput_fixed(b, m->t_ns / 1e3, 3);
        bputs(b, ",\"args\":{\"allocated\":");
        bput_fixed(b, MIB(m->allocated), 2);
        bputs(b, ",\"reserved\":");
        bput_fixed(b, MIB(m->reserved), 2);
        bputs(b, "}}");
    }
    if (r->oom) {
        /* an instant event where PyTorch would have raised OutOfMemoryError */
        double t = 0;
        if (r->n_samples) t = r->samples[r->n_samples - 1].t_ns;
        if (r->n_spans && r->spans[r->n_spans - 1].end_ns > t) t = r->spans[r->n_spans - 1].end_ns;
        bprintf(b, ",\n{\"name\":\"CUDA out of memory\",\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,"
                "\"ts\":%.3f,\"args\":{\"step\":%d,\"op\":\"", t / 1e3, r->oom_step);
        json_escape(b, r->oom_op >= 0 ? graph_op_c(p->graph, r->oom_op)->name : "(build)");
        bprintf(b, "\",\"requested_bytes\":%llu}}", (unsigned long long)r->oom_info.requested);
    }
    bprintf(b, "\n]}\n");
}

VrStatus report_make_dir(const char *dir, char *err, size_t errlen) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp) {
        snprintf(err, errlen, "cannot create %.64s...: the path is %zu bytes, more than %zu",
                 dir, strlen(dir), sizeof tmp - 1);
        return VR_EINVAL;
    }
    for (char *q = tmp + 1; *q; q++) {
        if (*q != '/') continue;
        *q = 0;
        if (mkdir(tmp, 0777) && errno != EEXIST) goto fail;
        *q = '/';
    }
    if (mkdir(tmp, 0777) && errno != EEXIST) goto fail;
    return VR_OK;
fail:
    snprintf(err, errlen, "cannot create %.3000s: %s", tmp, strerror(errno));
    return VR_EIO;
}

VrStatus report_write_all(const char *dir, const Plan *p, const SimResult *r, char *err,
                          size_t errlen) {
    VrStatus st = report_make_dir(dir, err, errlen);
    if (st) return st;
    char path[4200];
    char *js = report_summary_json(p, r);
    if (!js) return VR_ENOMEM;
    snprintf(path, sizeof path, "%s/summary.json", dir);
    st = report_write_file(path, js, strlen(js), err, errlen);
    free(js);
    if (st) return st;
    Buf b = {0};
    write_memory_csv(&b, p, r);
    if (b.bad) { free(b.p); return VR_ENOMEM; }
    snprintf(path, sizeof path, "%s/memory.csv", dir);
    st = report_write_file(path, b.p ? b.p : "", b.n, err, errlen);
    b.n = 0;
    if (!st) {
        write_trace_json(&b, p, r);
        if (b.bad) st = VR_ENOMEM;
        size_t tn = 0;
        char *trace = st ? NULL : safetext_utf8(b.p, b.n, &tn); /* op names as valid UTF-8 */
        if (!st && !trace) st = VR_ENOMEM;
        snprintf(path, sizeof path, "%s/trace.json", dir);
        if (!st) st = report_write_file(path, trace, tn, err, errlen);
        free(trace);
    }
    free(b.p);
    return st;
}

/* ---- the output set ----------------------------------------------------------------------
 * A run's files are written into a fresh directory beside --out ("DIR.tmp-XXXXXX", mkdtemp)
 * and then put in DIR's place as a whole: renamed onto a DIR that does not exist, or exchanged
 * with an existing one (renameat2 RENAME_EXCHANGE, one atomic step; where the file system lacks
 * it, DIR is first renamed aside, so a reader finds either the old set, no set, or the new one,
 * never a mix). The old set is then removed. A DIR that holds files vrsim does not write is
 * refused rather than replaced. */

static const char *const SET_FILES[] = {"summary.json", "memory.csv", "trace.json", "report.html"};
#define N_SET_FILES (sizeof SET_FILES / sizeof SET_FILES[0])

const char *report_set_file(int i) { return i >= 0 && (size_t)i < N_SET_FILES ? SET_FILES[i] : NULL; }

/* Whether every entry of dir is a file of the set (or a leftover temporary of one). */
static bool only_set_files(const char *dir, char *bad, size_t badlen) {
    DIR *d = opendir(dir);
    if (!d) return true;
    bool ok = true;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        bool mine = false;
        for (size_t i = 0; i < N_SET_FILES; i++) {
            size_t n = strlen(SET_FILES[i]);
            if (strncmp(e->d_name, SET_FILES[i], n) == 0 &&
                (e->d_name[n] == 0 || strncmp(e->d_name + n, ".tmp.", 5) == 0))
                mine = true;
        }
        if (!mine) { ok = false; snprintf(bad, badlen, "%s", e->d_name); break; }
    }
    closedir(d);
    return ok;
}

/* Removes the set's files (and their temporaries) from dir, then dir itself if empty. */
void report_remove_set_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[4400];
        while ((e = readdir(d))) {
            for (size_t i = 0; i < N_SET_FILES; i++) {
                size_t n = strlen(SET_FILES[i]);
                if (strncmp(e->d_name, SET_FILES[i], n) == 0 &&
                    (e->d_name[n] == 0 || strncmp(e->d_name + n, ".tmp.", 5) == 0)) {
                    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
                    unlink(path);
                }
            }
        }
        closedir(d);
    }
    rmdir(dir);
}

VrStatus report_stage_dir(const char *dir, char *tmp, size_t tmplen, char *err, size_t errlen) {
    struct stat st;
    if (lstat(dir, &st) == 0 && S_ISLNK(st.st_mode)) {
        snprintf(err, errlen, "--out %s: is a symbolic link: the output set replaces the folder "
                 "itself, so give the folder's own path", dir);
        return VR_EINVAL;
    }
    if (stat(dir, &st) == 0) {
        char bad[256];
        if (!S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "--out %s: exists and is not a directory", dir);
            return VR_EINVAL;
        }
        if (!only_set_files(dir, bad, sizeof bad)) {
            snprintf(err, errlen, "--out %s holds '%s', which vrsim did not write: give a new or empty "
                     "folder (the output set replaces the folder as a whole)", dir, bad);
            return VR_EINVAL;
        }
    }
    /* the parent must exist for the temporary beside dir */
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", dir);
    size_t L = strlen(parent);
    while (L > 1 && parent[L - 1] == '/') parent[--L] = 0;
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = 0;
        VrStatus s2 = report_make_dir(parent, err, errlen);
        if (s2) return s2;
    }
    /* the folders a killed run left beside dir go first; this one's name carries the pid that
     * makes it, so the next run can tell it from one still being written (outpath.h) */
    parent[L] = 0;
    memcpy(parent, dir, L);
    outpath_clean_stale(parent);
    if ((size_t)snprintf(tmp, tmplen, "%.*s.tmp-%ld-XXXXXX", (int)L, dir, (long)getpid()) >= tmplen) {
        snprintf(err, errlen, "--out %s: path too long", dir);
        return VR_EINVAL;
    }
    if (!mkdtemp(tmp)) {
        snprintf(err, errlen, "cannot create a folder beside %s: %s", dir, strerror(errno));
        tmp[0] = 0;
        return VR_EIO;
    }
    mode_t um = umask(0); /* mkdtemp makes it 0700; give it mkdir's mode under the umask */
    umask(um);
    chmod(tmp, 0777 & ~um);
    return VR_OK;
}

VrStatus report_commit_dir(const char *tmp, const char *dir, char *err, size_t errlen) {
    char d[4096];
    snprintf(d, sizeof d, "%s", dir);
    size_t L = strlen(d);
    while (L > 1 && d[L - 1] == '/') d[--L] = 0;
    if (rename(tmp, d) == 0) return VR_OK; /* there was no set yet (or an empty folder) */
    if (errno != EEXIST && errno != ENOTEMPTY) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        return VR_EIO;
    }
#ifdef RENAME_EXCHANGE
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, d, RENAME_EXCHANGE) == 0) {
        report_remove_set_dir(tmp); /* now the old set */
        return VR_OK;
    }
#endif
    char old[4200];
    snprintf(old, sizeof old, "%s.old-%ld", d, (long)getpid());
    if (rename(d, old) != 0 || rename(tmp, d) != 0) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        rename(old, d);
        return VR_EIO;
    }
    report_remove_set_dir(old);
    return VR_OK;
}
