/* watchdog.c: the scenario sandbox's last line of defence.
 *
 * The instruction-count hook stops runaway Lua loops, but Lua runs __gc finalizers with hooks
 * off, and a backtracking string pattern (string.find(s, ".-.-.-b")) runs inside C, where no
 * hook fires: either would hang vrsim. While a scenario is evaluated, a one-second interval
 * timer checks that the hook (or vrsim's own C code) made progress; after NO_PROGRESS_S idle
 * ticks it prints a one-line error naming the scenario and exits with status 2 (bad input).
 * Long C work of vrsim's own (watchdog_enter_c .. leave_c) is bounded too, by C_WORK_S.
 * Everything the signal handler touches is async-signal-safe: sig_atomic_t flags, write(2),
 * _exit(2), and the tick function (watchdog_on_tick), which must be too. */
#include "watchdog.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define NO_PROGRESS_S 5
/* vrsim's own C work between two calls back into Lua (deriving a backward graph): no beat
 * comes from it, so it gets a longer bound of its own, not none; a model or accumulation the
 * derivation cannot finish in that time is stopped like a scenario that hangs */
#define C_WORK_S 120

static volatile sig_atomic_t beats, last_beats, idle_ticks, in_c, c_ticks;
static char message[1200], c_message[1200];
static size_t message_len, c_message_len;
static struct sigaction previous;
static int armed;
static void (*volatile tick_fn)(void);

static void on_tick(int sig) {
    (void)sig;
    void (*fn)(void) = tick_fn;
    if (fn && !in_c) fn();
    if (in_c && ++c_ticks >= C_WORK_S) {
        ssize_t w = write(STDERR_FILENO, c_message, c_message_len);
        (void)w;
        _exit(2);
    }
    if (in_c || beats != last_beats) {
        idle_ticks = 0;
    } else if (++idle_ticks >= NO_PROGRESS_S) {
        ssize_t w = write(STDERR_FILENO, message, message_len);
        (void)w;
        _exit(2);
    }
    last_beats = beats;
}

void watchdog_arm(const char *name) {
    int n = snprintf(message, sizeof message,
                     "vrsim: %s: the scenario made no progress for %d s (a loop in a __gc "
                     "finalizer, or a string pattern that backtracks without end?); stopped\n",
                     name, NO_PROGRESS_S);
    message_len = n < 0 ? 0 : (size_t)n < sizeof message ? (size_t)n : sizeof message - 1;
    n = snprintf(c_message, sizeof c_message,
                 "vrsim: %s: deriving the training step's graph ran for more than %d s (a model, "
                 "sequence or grad_accum too large to simulate here?); stopped\n",
                 name, C_WORK_S);
    c_message_len = n < 0 ? 0 : (size_t)n < sizeof c_message ? (size_t)n : sizeof c_message - 1;
    beats = last_beats = idle_ticks = in_c = c_ticks = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_tick;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, &previous) != 0) return;
    struct itimerval tv = {.it_interval = {1, 0}, .it_value = {1, 0}};
    if (setitimer(ITIMER_REAL, &tv, NULL) != 0) { sigaction(SIGALRM, &previous, NULL); return; }
    armed = 1;
}

void watchdog_beat(void) { beats = beats + 1; }
void watchdog_on_tick(void (*fn)(void)) { tick_fn = fn; }
void watchdog_enter_c(void) { c_ticks = 0; in_c = 1; }
void watchdog_leave_c(void) { in_c = 0; beats = beats + 1; }

void watchdog_disarm(void) {
    if (!armed) return;
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    sigaction(SIGALRM, &previous, NULL);
    armed = 0;
}
