/* watchdog.h: stops a scenario that makes no progress where the instruction hook cannot see it. */
#ifndef VRSIM_WATCHDOG_H
#define VRSIM_WATCHDOG_H

/* Starts watching the evaluation of the scenario `name` (a path, quoted in the message). */
void watchdog_arm(const char *name);
/* Progress: the instruction hook and the bindings call it. */
void watchdog_beat(void);
/* Around long C work of vrsim's own (graph derivation): progress, but bounded (120 s). */
void watchdog_enter_c(void);
void watchdog_leave_c(void);
/* fn (NULL: none) runs at every tick, in the signal handler, outside vrsim's own C work: the
 * planner state's hook is armed from it (bind.c). It must be async-signal-safe. */
void watchdog_on_tick(void (*fn)(void));
/* Stops watching. */
void watchdog_disarm(void);

#endif
