/* fuzz_validate.c: libFuzzer harness over `vrsim validate`'s reader of record files: the input
 * is a whole .jsonl file, read the checked way (sim/infile.c), each line parsed as strict JSON
 * (sim/jsonin.c), its provenance fields and measurements checked (sim/cmd_validate.c), rebuilt
 * as a scenario (lua/vrsim/record.lua, the planner) and simulated. Any input must end with exit
 * status 0 (rows, or records named as skipped) or 2 (bad input, named); a crash, a sanitizer
 * report, a hang or another status is a finding. Run from the repository root (lua/ is found
 * there), with -close_fd_mask=1 so the table goes nowhere (tests/fuzz/Makefile does). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gsl/gsl_errno.h>

#include "cmds.h"
#include "vr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[96];
    if (!path[0]) {
        gsl_set_error_handler_off();
        char dir[64];
        snprintf(dir, sizeof dir, "/tmp/vrsim-fuzz-validate.%ld", (long)getpid());
        if (mkdir(dir, 0700) && errno != EEXIST) abort();
        snprintf(path, sizeof path, "%s/records.jsonl", dir);
    }
    if (size > 1 << 16) return 0;
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    size_t w = fwrite(data, 1, size, f);
    if (fclose(f) != 0 || w != size) abort();
    char *argv[] = {"validate", path, NULL};
    int rc = cmd_validate(2, argv);
    if (rc != VR_EXIT_OK && rc != VR_EXIT_USAGE) abort();
    return 0;
}
