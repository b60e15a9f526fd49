/* main.c: the vrsim command line: dispatches to the subcommands of cmds.h. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <gsl/gsl_errno.h>

#include "cmds.h"
#include "vr.h"

/* The release is vr.h's VRSIM_VERSION; the build may name its commit (make passes
 * VRSIM_COMMIT when git is there). */
#ifndef VRSIM_COMMIT
#define VRSIM_COMMIT ""
#endif

static const char *const COMMANDS[] = {"validate", "replay", "gpus", "fields", "sweep", "maxbatch",
                                       "shop", "help"};

/* Levenshtein distance of two short words (at most 63 characters each; longer: a large number). */
static int distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 1000;
    int prev[64], cur[64];
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int c = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int d = prev[j] + 1 < cur[j - 1] + 1 ? prev[j] + 1 : cur[j - 1] + 1;
            cur[j] = c < d ? c : d;
        }
        memcpy(prev, cur, sizeof(int) * (lb + 1));
    }
    return prev[lb];
}

/* A first argument that is neither a subcommand nor a file, but close to a subcommand's name:
 * the subcommand it was meant to be, else NULL. */
static const char *mistyped_command(const char *arg) {
    struct stat st;
    if (arg[0] == '-' || strchr(arg, '/') || strchr(arg, '.') || stat(arg, &st) == 0) return NULL;
    const char *best = NULL;
    int bd = 1000;
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++) {
        int d = distance(arg, COMMANDS[i]);
        if (d < bd) bd = d, best = COMMANDS[i];
    }
    size_t n = strlen(arg);
    return bd <= (n > 6 ? 2 : 1) + (n > 9) ? best : NULL;
}

static void usage(FILE *f) {
    fprintf(f,
        "vrsim: a discrete-event GPU memory simulator for training steps\n"
        "\n"
        "  vrsim SCENARIO.lua [--set k=v ...]   simulate: fits?, peak memory, breakdown, time\n"
        "  vrsim CONFIG.yaml --gpu NAME         the same for a trainer's config (axolotl, accelerate)\n"
        "  vrsim sft.yaml --accelerate F.yaml --gpu NAME   a TRL config under accelerate launch\n"
        "  vrsim validate [FILE.jsonl ...]     predictions against measured runs (validation/records/)\n"
        "  vrsim replay TRACE.csv[.gz]          replay a real PyTorch allocator trace\n"
        "  vrsim gpus [--sources]               the hardware catalog and where its figures come from\n"
        "  vrsim fields                         every scenario field: type, default, meaning\n"
        "  vrsim sweep SCENARIO --set k=a,b ...  the cross product of settings, in parallel\n"
        "  vrsim maxbatch SCENARIO [--field F]   the largest micro-batch (seq, resolution) that fits\n"
        "  vrsim shop SCENARIO --tokens N        each catalog GPU: fits?, job hours and cost\n"
        "\n"
        "  vrsim --version                      the version of this build\n"
        "\n"
        "Each command has --help. Exit status, every command: 0 ok/fits, 3 does not fit, 2 bad input or\n"
        "usage, 1 internal or I/O (an output that cannot be written).\n");
}

int main(int argc, char **argv) {
    gsl_set_error_handler_off();
#ifdef __GLIBC__
    /* A run makes and drops millions of small blocks (Lua tables, graph arrays, allocator
     * blocks): let the heap grow in 64 MiB steps and never hand memory back to the kernel
     * mid-run, instead of a brk call and fresh page faults each time it crosses the default
     * 128 KiB thresholds (best of ten runs of LLaMA2-70B ZeRO-3 on 64 GPUs: 171 -> 160 ms). */
    mallopt(M_TOP_PAD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
    if (argc < 2) { usage(stderr); return VR_EXIT_USAGE; }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return VR_EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0 || strcmp(cmd, "version") == 0) {
        printf("vrsim %s%s%s\n", VRSIM_VERSION, VRSIM_COMMIT[0] ? " " : "", VRSIM_COMMIT);
        return VR_EXIT_OK;
    }
    if (strcmp(cmd, "validate") == 0) return cmd_validate(argc - 1, argv + 1);
    if (strcmp(cmd, "replay") == 0) return cmd_replay(argc - 1, argv + 1);
    if (strcmp(cmd, "gpus") == 0) return cmd_gpus(argc - 1, argv + 1);
    if (strcmp(cmd, "fields") == 0) return cmd_fields(argc - 1, argv + 1);
    if (strcmp(cmd, "sweep") == 0) return cmd_sweep(argc - 1, argv + 1);
    if (strcmp(cmd, "maxbatch") == 0) return cmd_maxbatch(argc - 1, argv + 1);
    if (strcmp(cmd, "shop") == 0) return cmd_shop(argc - 1, argv + 1);
    const char *meant = mistyped_command(cmd);
    if (meant) {
        fprintf(stderr, "vrsim: unknown command '%s'; did you mean 'vrsim %s'? (vrsim --help lists "
                "the commands; a scenario is a .lua file)\n", cmd, meant);
        return VR_EXIT_USAGE;
    }
    return cmd_run(argc - 1, argv + 1);
}
