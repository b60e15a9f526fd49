/* main.c: the vrsim command line: dispatches to the subcommands of cmds.h. */
#include <stdio.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <gsl/gsl_errno.h>

#include "cmds.h"
#include "vr.h"

static void usage(FILE *f) {
    fprintf(f,
        "vrsim: a discrete-event GPU memory simulator for training steps\n"
        "\n"
        "  vrsim SCENARIO.lua [--set k=v ...]   simulate: fits?, peak memory, breakdown, time\n"
        "  vrsim validate [FILE.jsonl ...]     predictions against measured runs (validation/)\n"
        "  vrsim replay TRACE.csv[.gz]          replay a real PyTorch allocator trace\n"
        "  vrsim gpus [--sources]               the hardware catalog and where its figures come from\n"
        "  vrsim fields                         every scenario field: type, default, meaning\n"
        "  vrsim sweep SCENARIO --set k=a,b ...  the cross product of settings, in parallel\n"
        "  vrsim maxbatch SCENARIO [--field F]   the largest micro-batch (seq, resolution) that fits\n"
        "  vrsim shop SCENARIO --tokens N        each catalog GPU: fits?, job hours and cost\n"
        "\n"
        "Each command has --help. Exit status: 0 ok/fits, 3 does not fit, 2 bad input, 1 internal.\n");
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
    if (strcmp(cmd, "validate") == 0) return cmd_validate(argc - 1, argv + 1);
    if (strcmp(cmd, "replay") == 0) return cmd_replay(argc - 1, argv + 1);
    if (strcmp(cmd, "gpus") == 0) return cmd_gpus(argc - 1, argv + 1);
    if (strcmp(cmd, "fields") == 0) return cmd_fields(argc - 1, argv + 1);
    if (strcmp(cmd, "sweep") == 0) return cmd_sweep(argc - 1, argv + 1);
    if (strcmp(cmd, "maxbatch") == 0) return cmd_maxbatch(argc - 1, argv + 1);
    if (strcmp(cmd, "shop") == 0) return cmd_shop(argc - 1, argv + 1);
    return cmd_run(argc - 1, argv + 1);
}
