/* diagnose.c: what exceeds the card when a run does not fit (see diagnose.h). */
#include "diagnose.h"

#include <string.h>

#define GIB(x) ((double)(x) / 1073741824.0)

VrStatus diagnose_oom(const Plan *p, const SimResult *r, Diagnosis *d, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    d->peak_op = -1;
    d->capacity = (double)p->alloc.capacity;
    if (!r->oom) return VR_OK;
    d->requested = (double)r->oom_info.requested;
    d->oom_allocated = (double)r->oom_info.allocated;
    d->reserved_unallocated = (double)r->oom_info.reserved_unallocated;
    /* the same graph with nothing to stop it: the ideal allocator (reserved == allocated), no
     * capacity, every sample kept */
    EngineConfig ec;
    plan_engine_config(p, true, &ec);
    ec.skip_live_at_peak = true;
    AllocConfig ideal = p->alloc;
    ideal.kind = ALLOC_IDEAL;
    ideal.capacity = 0;
    SimResult *u = NULL;
    VrStatus st = engine_run(p->graph, &ec, &ideal, &u, err, errlen);
    if (st) return st;
    /* the model states of the steps (the build's own peak, an fp32 model before .to(), is the
     * building's), and the most held at once */
    int best_states = -1, best = -1;
    double top_states = -1;
    for (int i = 0; i < u->n_samples; i++) {
        const MemSample *m = &u->samples[i];
        bool build = m->op < 0 || graph_op_c(p->graph, m->op)->phase == PH_BUILD;
        double s = (double)m->cat[CAT_PARAM] + (double)m->cat[CAT_GRAD] + (double)m->cat[CAT_OPTSTATE];
        if (!build && s > top_states) { top_states = s; best_states = i; }
        if (best < 0 || m->allocated > u->samples[best].allocated) best = i;
    }
    if (best_states < 0) best_states = best; /* no step ran: the build's */
    if (best < 0) { /* no timeline: nothing to say */
        engine_result_free(u);
        return VR_OK;
    }
    const MemSample *ms = &u->samples[best_states], *mp = &u->samples[best];
    d->states[0] = (double)ms->cat[CAT_PARAM];
    d->states[1] = (double)ms->cat[CAT_GRAD];
    d->states[2] = (double)ms->cat[CAT_OPTSTATE];
    d->states_total = d->states[0] + d->states[1] + d->states[2];
    d->need = (double)mp->allocated;
    d->peak_op = mp->op;
    for (int c = 0; c < CAT_COUNT; c++) d->at_peak[c] = (double)mp->cat[c];
    engine_result_free(u);

    double cap = d->capacity;
    double states_at_peak = d->at_peak[CAT_PARAM] + d->at_peak[CAT_GRAD] + d->at_peak[CAT_OPTSTATE];
    bool building = d->peak_op < 0 || graph_op_c(p->graph, d->peak_op)->phase == PH_BUILD;
    if (cap > 0 && d->states_total > cap) d->cause = OOM_MODEL_STATES;
    else if (cap > 0 && d->need > cap && building) d->cause = OOM_BUILDING;
    else if (cap > 0 && d->need > cap)
        d->cause = states_at_peak + d->at_peak[CAT_ACTIVATION] > cap ? OOM_ACTIVATIONS : OOM_TEMPORARY;
    else d->cause = OOM_FRAGMENTATION; /* allocated < capacity <= reserved */
    return VR_OK;
}

/* The op's name and phase, as "op 'NAME' (PHASE)". */
static void op_words(char *out, size_t n, const Plan *p, int op) {
    if (op < 0 || op >= graph_num_ops(p->graph)) snprintf(out, n, "the model's parameters");
    else snprintf(out, n, "op '%s' (%s)", graph_op_c(p->graph, op)->name,
                  phase_name(graph_op_c(p->graph, op)->phase));
}

void diagnose_print(FILE *f, const Plan *p, const Diagnosis *d, const char *in) {
    char op[320];
    op_words(op, sizeof op, p, d->peak_op);
    double cap = d->capacity;
    double st = d->at_peak[CAT_PARAM] + d->at_peak[CAT_GRAD] + d->at_peak[CAT_OPTSTATE];
    switch (d->cause) {
    case OOM_NONE:
        return;
    case OOM_MODEL_STATES:
        fprintf(f, "%swhy: the model states alone need %.2f GiB (parameters %.2f + gradients %.2f +\n"
                   "%s  optimizer state %.2f GiB), more than the %.2f GiB the allocator may use. No\n"
                   "%s  batch size, checkpointing or allocator setting changes them: they must shrink\n"
                   "%s  (8-bit or offloaded optimizer state, sharding over more GPUs, LoRA) or the\n"
                   "%s  card must be larger. With activations the step needs %.2f GiB.\n",
                in, GIB(d->states_total), GIB(d->states[0]), GIB(d->states[1]), in,
                GIB(d->states[2]), GIB(cap), in, in, in, GIB(d->need));
        break;
    case OOM_ACTIVATIONS:
        fprintf(f, "%swhy: activations: at %s the step needs %.2f GiB,\n"
                   "%s  model states %.2f GiB and activations %.2f GiB, more than the %.2f GiB the\n"
                   "%s  allocator may use even without fragmentation; the model states alone fit.\n"
                   "%s  Checkpointing or a smaller micro-batch cut the activations.\n",
                in, op, GIB(d->need), in, GIB(st), GIB(d->at_peak[CAT_ACTIVATION]), GIB(cap), in, in);
        break;
    case OOM_TEMPORARY:
        fprintf(f, "%swhy: a temporary: at %s the step needs %.2f GiB;\n"
                   "%s  model states (%.2f GiB) and activations (%.2f GiB) fit in the %.2f GiB the\n"
                   "%s  allocator may use, the %.2f GiB of temporaries alive there take it over.\n",
                in, op, GIB(d->need), in, GIB(st), GIB(d->at_peak[CAT_ACTIVATION]), GIB(cap), in,
                GIB(d->at_peak[CAT_TEMP]));
        break;
    case OOM_BUILDING:
        fprintf(f, "%swhy: building the model: at %s it holds %.2f GiB (parameters\n"
                   "%s  %.2f GiB, temporaries %.2f GiB), more than the %.2f GiB the allocator may use,\n"
                   "%s  although the model states of the step (%.2f GiB) fit.%s\n",
                in, op, GIB(d->need), in, GIB(d->at_peak[CAT_PARAM]), GIB(d->at_peak[CAT_TEMP]),
                GIB(cap), in, GIB(d->states_total),
                strstr(p->knobs, "training.build=cast") ? " It is built in fp32 first\n"
                "    (build = \"cast\", as from_config): loaded as from_pretrained(torch_dtype=...)\n"
                "    loads it (build = \"direct\"), it has no fp32 copy." : "");
        break;
    case OOM_FRAGMENTATION:
        fprintf(f, "%swhy: fragmentation: the run never holds more than %.2f GiB (at %s),\n"
                   "%s  less than the %.2f GiB the allocator may use, but when it failed %.2f GiB were\n"
                   "%s  reserved and unallocated, in pieces none of which takes the %.2f MiB asked for.\n",
                in, GIB(d->need), op, in, GIB(cap), GIB(d->reserved_unallocated), in,
                d->requested / 1048576.0);
        if (!p->alloc.expandable_segments)
            fprintf(f, "%s  expandable_segments:True (--alloc-conf) lets segments grow instead.\n", in);
        else
            fprintf(f, "%s  Expandable segments are on already: their pages and per-stream segments leave\n"
                       "%s  this much unplaceable; less in use at that op is the way.\n", in, in);
        break;
    }
}
