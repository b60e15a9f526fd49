/* replay.h: reading PyTorch allocator traces and replaying them through the allocator model.
 *
 * Two input formats:
 *   CSV (plain or gzip), as docs/validation.md, "Record format", gives it: a header naming the columns, at least
 *     `action`, `addr` and `size` (`stream`, `seq`, `time_us` and any others are optional), then
 *     one event a line. Extra columns (e.g. `frames`) are ignored.
 *   JSON written by tools/snapshot_to_json.py from a pickled torch.cuda.memory._snapshot():
 *     {"device_traces": [[{"action", "addr", "size", "stream", "time_us"}, ...], ...],
 *      "segments": [{"address", "total_size", "stream", "segment_type",
 *                    "blocks": [{"address", "size", "requested_size", "state"}, ...]}, ...]}
 *
 * Only alloc and free events decide anything; segment_alloc/segment_map events are compared
 * against, and a run of segment_free/segment_unmap events marks an empty_cache() call (docs/allocator.md
 * 11.9). A trace that starts mid-run is made whole by placing, before the first event, every
 * segment it frees before allocating and every block it frees before allocating (alloc_inject*),
 * and, for a snapshot, every segment and every allocated block of the snapshot that the trace
 * never touches.
 *
 * The reader checks the trace as it goes: a malformed line, a number out of range, events out of
 * order (seq going back), an alloc of a live address, a double free, or a size that differs from
 * the alloc's give VR_EINVAL with "FILE:LINE: what" in err. Nothing in a trace can crash or hang
 * the reader; every host allocation failure is VR_ENOMEM.
 */
#ifndef VR_REPLAY_H
#define VR_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "vr.h"

typedef enum TraceAction {
    TA_ALLOC = 0,
    TA_FREE,            /* free_requested immediately followed by its free_completed */
    TA_FREE_REQUESTED,  /* a free_requested whose free_completed comes later */
    TA_FREE_COMPLETED,
    TA_SEGMENT_ALLOC,
    TA_SEGMENT_FREE,
    TA_SEGMENT_MAP,
    TA_SEGMENT_UNMAP,
    TA_OOM,
} TraceAction;

/* Flags of a segment_free/segment_unmap event that starts a run of them. */
#define TRACE_RUN_START 1u      /* first of a run */
#define TRACE_RUN_BEFORE_NEW 2u /* the run is followed by segment_alloc/segment_map or oom */

typedef struct TraceEvent {
    uint64_t addr;   /* device address (oom: free device bytes) */
    uint64_t size;   /* bytes: unrounded request for alloc/free, segment bytes, oom: rounded */
    uint32_t line;   /* 1-based line of the file (CSV) or entry index (JSON) */
    uint32_t stream; /* dense stream index, ordered as the trace's stream values */
    uint8_t action;  /* TraceAction */
    uint8_t flags;   /* TRACE_RUN_* */
} TraceEvent;

typedef struct TraceBlock {
    uint64_t addr;   /* device address */
    uint64_t size;   /* unrounded request, bytes */
    uint64_t bytes;  /* bytes it occupies when known (a snapshot block), else 0 */
    uint32_t stream; /* dense index */
    uint32_t line;   /* where the trace first mentions it; 0 for a snapshot block */
} TraceBlock;

typedef struct TraceSegment {
    uint64_t addr;   /* device address */
    uint64_t size;   /* bytes */
    uint32_t stream; /* dense index */
    uint32_t line;   /* its segment_free event; 0 for a snapshot segment */
    bool small;      /* small pool */
} TraceSegment;

typedef struct Trace {
    char *name;             /* file name, for messages */
    bool json;              /* positions are entry indexes, not lines */
    TraceEvent *ev;         /* events to replay, in order */
    size_t n, cap;
    uint64_t raw_events;    /* events in the file (free_requested + free_completed count 2) */
    uint64_t n_alloc, n_free, n_segment_events, n_oom;
    uint64_t *streams;      /* trace stream value of each dense index */
    size_t nstreams;
    TraceBlock *pre;        /* blocks live before the first event, ascending address */
    size_t npre;
    TraceSegment *preseg;   /* non-expandable segments that existed before the first event:
                               freed before allocated, or in the snapshot and never allocated by
                               the trace; ascending address */
    size_t npreseg;
    uint64_t *measured_segs; /* sizes of segment_alloc (or segment_map) events, in order */
    size_t nmeasured, capmeasured;
    uint64_t measured_peak_reserved; /* max running Σ segment_alloc/map − segment_free/unmap */
    bool has_segment_events;
    bool expandable_trace;  /* it has segment_map events */
    uint64_t live_before;   /* bytes allocated before the trace that it never frees (model
                               weights, optimizer state): set by the caller, default 0; the
                               replay places them first as one block */
    bool no_hints;          /* set by the caller: ignore the trace's addresses and place new
                               segments as a simulation does (docs/allocator.md 11.3) */
    bool want_map;          /* set by the caller: the result keeps the allocator's segment map
                               as the replay ends (ReplayResult.map) */
} Trace;

/* Reads a trace file: gzip or plain CSV, or JSON (first non-blank byte '{'). On success *out is a
 * new Trace the caller frees with trace_free. On failure err holds one line "FILE:LINE: why"
 * (VR_EINVAL bad content, VR_EIO unreadable or truncated file, VR_ENOMEM). */
VrStatus trace_load(const char *path, Trace **out /* OUT */, char *err, size_t errlen);

/* Parses a trace held in memory (CSV or JSON as above); `name` is used in messages. The data
 * need not be NUL-terminated and may contain any bytes. */
VrStatus trace_parse(const char *name, const char *data, size_t len, Trace **out /* OUT */,
                     char *err, size_t errlen);

/* trace_parse through the streaming reader of trace_load, fed `chunk` bytes at a time (for
 * tests and the fuzzer: it must give the same trace, or the same error, as trace_parse). */
VrStatus trace_parse_chunked(const char *name, const char *data, size_t len, size_t chunk,
                             Trace **out /* OUT */, char *err, size_t errlen);

void trace_free(Trace *t); /* NULL is a no-op */

typedef struct ReplayResult {
    uint64_t events;                /* events in the trace */
    uint64_t events_replayed;       /* Trace.ev entries replayed (all, or up to the OOM) */
    AllocStats stats;               /* the model's statistics at the end */
    uint64_t peak_allocated;        /* bytes */
    uint64_t peak_reserved;         /* bytes */
    uint64_t allocated_at_peak_reserved; /* most bytes allocated while reserved stood at its
                                            peak */
    double fragmentation_at_peak;   /* 1 - allocated_at_peak_reserved / peak_reserved: the part
                                       of the largest reservation never in use at once */
    uint64_t segment_allocs;        /* segment_alloc (segment_map) events PyTorch would record */
    uint64_t num_alloc_retries, num_ooms;
    uint64_t empty_cache_calls;     /* segment_free runs replayed as empty_cache() */
    uint64_t injected_blocks, injected_bytes; /* state rebuilt before the first event (live_before
                                                 included) */
    uint64_t address_mismatches;    /* allocs that landed at another address than the trace's */
    uint32_t first_address_mismatch_line;
    bool has_measured;              /* the trace has segment events */
    uint64_t measured_peak_reserved;
    uint64_t measured_segment_allocs;
    uint64_t measured_ooms;         /* oom events in the trace */
    bool segments_match;            /* same count, sizes and order */
    size_t first_segment_mismatch;  /* index of the first differing segment (if !match) */
    uint64_t *segs;                 /* replayed segment sizes in order (owned; replay_result_clear) */
    size_t nsegs;
    AllocBlockInfo *map;            /* with Trace.want_map: every block of every segment as the
                                       replay ended (owned; replay_result_clear) */
    size_t nmap;
    bool oom;                       /* the model ran out of memory on an alloc the trace made */
    uint32_t oom_line;
    AllocOomInfo oom_info;
} ReplayResult;

/* Replays t through a new allocator made from cfg. *res is filled (the caller releases it with
 * replay_result_clear). A simulated OOM on an alloc that PyTorch served is a result (res->oom,
 * replay stops there), not an error. VR_ENOMEM on host failure; VR_EINVAL with err if cfg is
 * unusable. */
VrStatus replay_run(const Trace *t, const AllocConfig *cfg, ReplayResult *res /* OUT */,
                    char *err, size_t errlen);

/* replay_run that also runs alloc_check after every check_every-th event and after the last
 * (0 = never); a broken invariant is VR_EINVAL naming the event. For tests and the fuzzer. */
VrStatus replay_run_checked(const Trace *t, const AllocConfig *cfg, size_t check_every,
                            ReplayResult *res /* OUT */, char *err, size_t errlen);

void replay_result_clear(ReplayResult *res);

#endif
