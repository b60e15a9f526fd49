/* fuzz_replay.c: libFuzzer harness over the trace reader and the replayer (sim/replay.c) with the
 * allocator model (sim/alloc.c) behind it. Any input must give either a loaded trace or a one-line
 * error naming its position; a loaded trace must replay without breaking an allocator invariant
 * (alloc_check runs during the replay) under four allocator settings picked by the input's length.
 * Build and run: make fuzz (tests/fuzz/Makefile). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "replay.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Trace *t = NULL;
    char err[512], err2[512];
    VrStatus st = trace_parse("fuzz", (const char *)data, size, &t, err, sizeof err);
    /* the streaming reader of trace_load, fed in small chunks, must agree exactly */
    Trace *t2 = NULL;
    size_t chunk = size ? 1 + data[size - 1] % 61 : 1;
    VrStatus st2 = trace_parse_chunked("fuzz", (const char *)data, size, chunk, &t2, err2,
                                       sizeof err2);
    if (st != st2 || (st != VR_OK && strcmp(err, err2) != 0))
        abort();
    if (st == VR_OK && (t->n != t2->n || t->npre != t2->npre || t->npreseg != t2->npreseg ||
                        t->nstreams != t2->nstreams || t->raw_events != t2->raw_events ||
                        (t->n && memcmp(t->ev, t2->ev, t->n * sizeof *t->ev) != 0) ||
                        (t->npre && memcmp(t->pre, t2->pre, t->npre * sizeof *t->pre) != 0)))
        abort();
    trace_free(t2);
    /* the first line doubles as a PYTORCH_CUDA_ALLOC_CONF string: any bytes, no crash */
    {
        char conf[256];
        size_t k = 0;
        while (k < size && k < sizeof conf - 1 && data[k] != '\n' && data[k] != 0) {
            conf[k] = (char)data[k];
            k++;
        }
        conf[k] = 0;
        AllocConfig c;
        alloc_config_default(&c);
        if (alloc_config_parse(&c, conf, err2, sizeof err2) == VR_OK) {
            Alloc *a;
            if (alloc_new(&c, &a) == VR_OK) {
                uint64_t addr;
                if (alloc_malloc(a, 1 + (uint64_t)k * 77777, 0, 0, &addr) == VR_OK &&
                    alloc_check(a) != VR_OK)
                    abort();
                alloc_free(a);
            }
        }
    }
    if (st != VR_OK) {
        /* an error is fine, but it must say where and never be empty */
        if (st != VR_EINVAL && st != VR_EIO && st != VR_ENOMEM)
            abort();
        if (strncmp(err, "fuzz", 4) != 0 || strchr(err, '\n'))
            abort();
        return 0;
    }
    static const char *const confs[] = {"", "expandable_segments:True",
                                        "max_split_size_mb:21,roundup_power2_divisions:4",
                                        ("garbage_collection_threshold:0.5,"
                                         "roundup_power2_divisions:[1:2,4:8,>:1]")};
    static const uint64_t caps[] = {0, 0, 200u << 20, 300u << 20};
    int k = (int)(size % 4);
    AllocConfig cfg;
    alloc_config_default(&cfg);
    if (alloc_config_parse(&cfg, confs[k], err, sizeof err) != VR_OK)
        abort();
    cfg.capacity = caps[k];
    cfg.fraction_set = caps[k] != 0;
    ReplayResult r;
    st = replay_run_checked(t, &cfg, t->n < 256 ? 1 : 64, &r, err, sizeof err);
    if (st == VR_EINVAL && strstr(err, "invariant"))
        abort(); /* the model broke one of its own invariants */
    if (st == VR_OK) {
        if (r.peak_allocated > r.peak_reserved && cfg.kind == ALLOC_CACHING)
            abort();
        replay_result_clear(&r);
    }
    trace_free(t);
    return 0;
}
