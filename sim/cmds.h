/* cmds.h: the subcommands of the vrsim command line. Each takes the arguments after its name
 * (argv[0] is the subcommand) and returns a process exit status (vr.h VR_EXIT_*). */
#ifndef VR_CMDS_H
#define VR_CMDS_H

#include <stdbool.h>

int cmd_run(int argc, char **argv);      /* vrsim SCENARIO [options]      (sim/cmd_run.c) */
int cmd_validate(int argc, char **argv); /* vrsim validate [FILE ...]     (sim/cmd_validate.c) */
int cmd_replay(int argc, char **argv);   /* vrsim replay TRACE [options]  (sim/cmd_replay.c) */
int cmd_gpus(int argc, char **argv);     /* vrsim gpus [--sources]        (sim/cmd_gpus.c) */
int cmd_fields(int argc, char **argv);   /* vrsim fields                  (sim/cmd_fields.c) */
int cmd_sweep(int argc, char **argv);    /* vrsim sweep SCENARIO --set k=a,b (sim/cmd_sweep.c) */
int cmd_maxbatch(int argc, char **argv); /* vrsim maxbatch SCENARIO      (sim/cmd_maxbatch.c) */
int cmd_shop(int argc, char **argv);     /* vrsim shop SCENARIO --tokens N (sim/cmd_shop.c) */

/* A scenario whose plan is a pipeline rank (plan->pp): every rank simulated and the step composed
 * (sim/cmd_pipeline.c). Takes ownership of plan; opts as the plan was loaded with. */
struct Plan;
struct ScenarioOptions;
int cmd_pipeline(const char *path, const char *src, const struct ScenarioOptions *opts, struct Plan *plan,
                 bool json);


#endif
