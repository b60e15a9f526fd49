/* variants.h: "what would help": a scenario simulated again with changes that could lower its
 * memory, each change a full simulation (its --set overrides on the scenario), none a rule of
 * thumb. The list goes to report.html (report_html.h renders it) and, for a run that does not
 * fit, to the terminal.
 *
 * For a run that fits, the changes are single ones that may lower its peak (gradient
 * checkpointing, LoRA, fused AdamW, half the micro-batch accumulated twice, expandable segments,
 * and with several GPUs ZeRO-2, ZeRO-3 and ZeRO-3 with offload); those that fit and reserve less
 * are kept, least memory first.
 *
 * For a run that does not fit the search goes further: also selective checkpointing, the
 * for-loop optimizer, 8-bit AdamW, a quarter of the micro-batch accumulated four times, the
 * model built in its training dtype (build = "direct"),
 * ZeRO-2 / ZeRO-3 with the optimizer state offloaded to the CPU on the same GPUs, FSDP2 and
 * ZeRO-3 on 2, 4 and 8 of the same card, every larger card of the catalog, and QLoRA; then every
 * pair of the changes that did not fit alone but lowered what the run needs (the peak allocated
 * through the ideal allocator without a limit, points.h need_alloc) and touch different settings
 * (8-bit AdamW with checkpointing, FSDP2 on 2 GPUs with checkpointing, ...). Those that fit are
 * kept: of the larger cards only the smallest that fits; ranked by what they ask of the user
 * (training unchanged before LoRA / QLoRA, which are marked as changing the training; fewer GPUs
 * first; an allocator setting, which costs nothing else, first of those) and then by step time.
 *
 * The points run in the worker pool of points.h (points_run_batch: forked children of a state
 * with vrsim's modules loaded, children kept with their graphs, so that the larger cards, which
 * differ in the GPU only, are answered on one graph) inside a helper process started with the
 * run, so that the first changes are simulated while the run itself is; the change of allocator
 * settings alone runs the run's own graph when building it read none. Optimizers with paged
 * state are not tried: vrsim does not model them. */
#ifndef VR_VARIANTS_H
#define VR_VARIANTS_H

#include <stdbool.h>
#include <stdio.h>

#include "engine.h"
#include "report_html.h"
#include "scenario.h"

/* What sort of change a variant is (ReportVariant.kind), for printing a few of each. */
typedef enum VariantKind {
    VK_ALLOCATOR = 0,          /* allocator settings only (expandable segments): no other cost */
    VK_SAME,                   /* the same GPUs and training: batch, checkpointing, optimizer,
                                  ZeRO stage */
    VK_OFFLOAD,                /* the optimizer state offloaded to the CPU */
    VK_MORE_GPUS_FSDP,         /* sharded over more GPUs of the same card by torch's FSDP2 */
    VK_MORE_GPUS_ZERO,         /* ... by DeepSpeed's ZeRO-3: another framework, so a kind of its
                                  own (a user's script runs one or the other) */
    VK_LARGER_GPU,             /* a larger card of the catalog */
    VK_TRAINING,               /* LoRA / QLoRA: trains something else */
    VK_COUNT
} VariantKind;

typedef struct Variants Variants;

/* Starts simulating the changes of the scenario at path (loaded with base's options, giving plan
 * p, which must outlive the call to variants_finish) in a helper process; where none can be
 * made, variants_finish simulates them. The caller owns *out (variants_finish or
 * variants_cancel frees it). VR_OK or VR_ENOMEM. */
VrStatus variants_start(const char *path, const ScenarioOptions *base, const Plan *p,
                        Variants **out /* OUT */);

/* With the run's result r: for a run that fits, the single changes that help; for one that does
 * not (need: the bytes it needs without a limit, diagnose.h Diagnosis.need; 0 if unknown), the
 * search above and the variants that fit, ranked. *out (the caller frees it with free()) holds
 * *n rows. Frees v. VR_OK or VR_ENOMEM. */
VrStatus variants_finish(Variants *v, const SimResult *r, double need,
                         ReportVariant **out /* OUT */, int *n /* OUT */);

void variants_cancel(Variants *v); /* stops the helper and frees v; NULL is a no-op */

/* Prints the best few of the n ranked variants (at most max; of each kind the first and the one
 * that leaves the most memory free on as many GPUs), each
 * with its peak, step time and the --set options that reproduce it, under the heading
 * "what would help (each simulated):" (run_fits: the rows of a run that fits, "what would lower
 * the peak"); n == 0 says that nothing tried fits (lowers the peak). */
void variants_print(FILE *f, const ReportVariant *v, int n, int max, bool run_fits);

#endif
