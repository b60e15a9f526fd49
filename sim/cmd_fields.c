/* cmd_fields.c: `vrsim fields`: every scenario field with its type, default and meaning, read
 * from the schema that checks scenarios (lua/vrsim/fields.lua reads lua/vrsim/schema.lua), so the
 * list cannot drift. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "scenario.h"
#include "vr.h"

int cmd_fields(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: vrsim fields\n\n"
                   "Lists every field a scenario may set, by section, with its type, default,\n"
                   "allowed values and meaning: what --set accepts, too.\n");
            return VR_EXIT_OK;
        }
        fprintf(stderr, "vrsim fields: unknown option %s (vrsim fields --help)\n", argv[i]);
        return VR_EXIT_USAGE;
    }
    char *text = NULL, err[512];
    VrStatus st = scenario_report_text("vrsim.fields", "fields_text", false, &text, err, sizeof err);
    if (st) {
        fprintf(stderr, "vrsim fields: %s\n", err);
        return st == VR_ENOMEM ? VR_EXIT_INTERNAL : VR_EXIT_USAGE;
    }
    fputs(text, stdout);
    free(text);
    return VR_EXIT_OK;
}
