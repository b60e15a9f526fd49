/* diagnose.h: why a run does not fit: what exceeds the card, found by simulating the same graph
 * again through the ideal allocator (no fragmentation) with no capacity limit.
 *
 * That run gives, op by op, what the step holds when nothing stops it. Its figures decide the
 * cause, one of:
 *   model states    the most parameters + gradients + optimizer state held at once is above the
 *                   capacity the allocator may use: nothing but shrinking them (or a larger card)
 *                   can fit, whatever the batch or the allocator settings;
 *   activations     at the step's peak, model states and activations together are above it;
 *   temporary       they are not, but the temporaries of the op at the peak (workspaces,
 *                   foreach optimizer temporaries, gradients of activations) take it over;
 *   building        the peak is while the model is being built (fp32 copies before .to(), ...);
 *   fragmentation   the step's peak allocated is within the capacity, but the caching allocator
 *                   could not place a request: allocated < capacity <= reserved. Only then are
 *                   expandable segments a fix.
 * Every figure printed is one of these simulations'. */
#ifndef VR_DIAGNOSE_H
#define VR_DIAGNOSE_H

#include <stdbool.h>
#include <stdio.h>

#include "engine.h"
#include "scenario.h"

typedef enum OomCause {
    OOM_NONE = 0,              /* the run fits (or the diagnosis could not run) */
    OOM_MODEL_STATES,
    OOM_ACTIVATIONS,
    OOM_TEMPORARY,
    OOM_BUILDING,
    OOM_FRAGMENTATION,
} OomCause;

typedef struct Diagnosis {
    OomCause cause;
    double capacity;           /* bytes the allocator may reserve (Plan.alloc.capacity) */
    double need;               /* bytes: peak allocated of the unlimited ideal run (build and
                                  every step), what the run holds at most without fragmentation */
    double states[3];          /* bytes of parameters, gradients, optimizer state at the moment
                                  the unlimited run held the most model states */
    double states_total;       /* their sum */
    int peak_op;               /* op at the unlimited run's peak allocated (-1: the build's
                                  parameters) */
    double at_peak[CAT_COUNT]; /* bytes per category at that peak */
    /* the caching run's failure (fragmentation) */
    double requested;          /* bytes the failing request asked for */
    double oom_allocated;      /* allocated when it failed */
    double reserved_unallocated; /* reserved - allocated when it failed */
} Diagnosis;

/* Diagnoses the run r of plan p: with r out of memory, simulates p's graph once more (the ideal
 * allocator, no capacity, with a timeline) and fills *d; with r fitting, d->cause is OOM_NONE.
 * VR_OK, VR_ENOMEM, or the engine's VR_EINVAL (message in err). */
VrStatus diagnose_oom(const Plan *p, const SimResult *r, Diagnosis *d /* OUT */, char *err,
                      size_t errlen);

/* Prints the cause in words with its figures, each line starting with indent; nothing for
 * OOM_NONE. */
void diagnose_print(FILE *f, const Plan *p, const Diagnosis *d, const char *indent);

#endif
