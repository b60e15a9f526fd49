/* fuzz_replay_json.c: fuzz_replay.c's harness held to replay's JSON form (the snapshots
 * tools/snapshot_to_json.py writes): input that is not a JSON object is skipped, so every
 * iteration exercises the strict JSON reader (sim/jsonin.c), the snapshot's structure checks and
 * the segments and blocks it places before the trace. Seeds: tests/fuzz/corpus/ and the
 * trace_*.json of tests/hostile/ (its other files are skipped). */
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
static int fuzz_any(const uint8_t *data, size_t size);

#define LLVMFuzzerTestOneInput fuzz_any
#include "fuzz_replay.c"
#undef LLVMFuzzerTestOneInput

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t i = 0;
    while (i < size && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r'))
        i++;
    if (i == size || data[i] != '{')
        return 0;
    return fuzz_any(data, size);
}
