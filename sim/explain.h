/* explain.h: `--explain`: a plain-language walk through one simulated training step, for
 * someone learning how training memory behaves: what is allocated when (build, then each phase
 * of the steady step), why the peak is where it is (the op and phase at the peak, what is live
 * then, the largest tensors), how step 0 differs, and where allocator slack comes from (reserved
 * but unallocated memory at the peak, the largest free block, and the caching-allocator rule of
 * docs/allocator.md behind each kind of free block). After an OOM it explains the failing
 * request the same way, and gives the cause that diagnose_oom found (diagnose.h).
 *
 * The walk through phases needs the timeline (EngineConfig.record_timeline = true); without it
 * the text says so and explains the peak and the slack only. */
#ifndef VR_EXPLAIN_H
#define VR_EXPLAIN_H

#include <stdio.h>

#include "diagnose.h"
#include "engine.h"
#include "scenario.h"

/* Prints the explanation of result r of plan p to f, with d (diagnose_oom of the same run; NULL:
 * not diagnosed) as the cause of an out-of-memory error. Reads only; allocates nothing that
 * outlives the call (host allocation failure shortens the text, never aborts). */
void explain_print(FILE *f, const Plan *p, const SimResult *r, const Diagnosis *d);

#endif
