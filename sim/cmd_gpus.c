/* cmd_gpus.c: `vrsim gpus [--sources]`: the hardware catalog with where each figure comes from. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "scenario.h"
#include "vr.h"

int cmd_gpus(int argc, char **argv) {
    bool sources = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sources") == 0) sources = true;
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: vrsim gpus [--sources]\n\n"
                   "Lists the GPU catalog (lua/hw/gpus.lua): memory, what torch reports as usable,\n"
                   "the CUDA context outside the allocator, bandwidth, bf16 rate, rental price\n"
                   "(lua/hw/prices.lua) and whether a calibrated profile exists. --sources adds\n"
                   "each figure's kind (measured, carried or datasheet) and the datasheet or\n"
                   "measurement behind it (docs/gpus.md). Add a GPU: lua/hw/README.md.\n");
            return VR_EXIT_OK;
        } else {
            fprintf(stderr, "vrsim gpus: unknown option %s (vrsim gpus --help)\n", argv[i]);
            return VR_EXIT_USAGE;
        }
    }
    char *text = NULL, err[512];
    VrStatus st = scenario_report_text("vrsim.gpus_report", "text", sources, &text, err, sizeof err);
    if (st) {
        fprintf(stderr, "vrsim gpus: %s\n", err);
        return st == VR_ENOMEM ? VR_EXIT_INTERNAL : VR_EXIT_USAGE;
    }
    fputs(text, stdout);
    free(text);
    return VR_EXIT_OK;
}
