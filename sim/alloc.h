/* alloc.h: device memory allocators behind one interface.
 *
 * ALLOC_CACHING is a model of PyTorch's CUDACachingAllocator (docs/allocator.md, "Specification"):
 * it decides, from a sequence of malloc/free calls alone, which segments would be cudaMalloc'ed,
 * which cached blocks are reused, and therefore reserved memory and fragmentation.
 * ALLOC_IDEAL keeps exact bytes (512-byte rounding, no caching): reserved == allocated. Reports
 * show the difference between the two as allocator slack.
 *
 * Addresses are simulated device addresses. The engine never interprets them; replay passes the
 * real addresses of a trace as hints so segment placement (and with it best-fit tie-breaking)
 * follows the trace (docs/allocator.md 11.2).
 *
 * Invariants (checked by alloc_check):
 *   reserved == allocated + cached free + blocks pending free (caching allocator)
 *   reserved <= capacity
 */
#ifndef VR_ALLOC_H
#define VR_ALLOC_H

#include <stdbool.h>
#include <stdint.h>

#include "vr.h"

typedef struct Alloc Alloc;

typedef enum AllocKind { ALLOC_CACHING = 0, ALLOC_IDEAL } AllocKind;

/* Host allocator hook (vr.h VrHostAllocFn): every host allocation of the allocator goes through
 * it, so tests can fail the Nth one. NULL in AllocConfig = the C library. */
typedef VrHostAllocFn AllocHostFn;

/* Largest request alloc_malloc accepts (bytes); larger ones are VR_EINVAL. */
#define ALLOC_MAX_REQUEST ((uint64_t)1 << 42)

/* What PYTORCH_CUDA_ALLOC_CONF and set_per_process_memory_fraction set. */
typedef struct AllocConfig {
    AllocKind kind;
    uint64_t capacity;               /* bytes the allocator may reserve in all (device total minus
                                        CUDA context and memory outside the allocator, or the
                                        memory-fraction cap); 0 = unlimited */
    bool fraction_set;               /* a memory fraction is set (enables garbage collection) */
    uint64_t max_split_size;         /* bytes; UINT64_MAX = unlimited (default) */
    uint64_t max_non_split_rounding; /* bytes; default 20 MiB */
    unsigned roundup_power2_divisions[16]; /* per interval floor(log2(size)) - 20; 0 = off */
    double gc_threshold;             /* garbage_collection_threshold in (0,1); 0 = off */
    bool expandable_segments;
    AllocHostFn host_alloc;          /* host memory hook; NULL = malloc/realloc/free */
    void *host_ud;                   /* passed to host_alloc */
} AllocConfig;

/* Statistics as torch.cuda.memory_stats() names them ("all" pool). Units: bytes or counts. */
typedef struct AllocStats {
    uint64_t allocated, allocated_peak;    /* allocated_bytes.all.current / .peak */
    uint64_t reserved, reserved_peak;      /* reserved_bytes.all */
    uint64_t active, active_peak;          /* active_bytes.all */
    uint64_t requested, requested_peak;    /* requested_bytes.all */
    uint64_t inactive_split, inactive_split_peak; /* inactive_split_bytes.all: bytes */
    uint64_t segments, segments_peak;      /* segment.all */
    uint64_t num_segment_allocs;           /* cudaMalloc calls (page maps under expandable) */
    uint64_t num_segment_frees;
    uint64_t num_alloc_retries;
    uint64_t num_ooms;
    uint64_t largest_free_block;           /* bytes, at the time of the call */
    uint64_t num_segment_unmaps;           /* page unmaps (expandable), included in frees */
    uint64_t injected_segments;            /* segments rebuilt by alloc_inject */
} AllocStats;

/* What PyTorch prints when it raises OutOfMemoryError. */
typedef struct AllocOomInfo {
    uint64_t requested;            /* rounded request, bytes */
    uint64_t capacity;             /* bytes */
    uint64_t free;                 /* capacity - reserved, bytes */
    uint64_t allocated;            /* allocated by PyTorch, bytes */
    uint64_t reserved_unallocated; /* reserved but unallocated, bytes */
} AllocOomInfo;

/* Events the allocator reports to an optional listener, as PyTorch's trace names them. */
typedef enum AllocEventKind {
    ALLOC_EV_SEGMENT_ALLOC,
    ALLOC_EV_SEGMENT_FREE,
    ALLOC_EV_SEGMENT_MAP,
    ALLOC_EV_SEGMENT_UNMAP,
    ALLOC_EV_OOM,
} AllocEventKind;
typedef void (*AllocListener)(void *ud, AllocEventKind kind, uint64_t addr, uint64_t size,
                              int stream);

/* Segment map, for reports: one entry per block in address order. */
typedef struct AllocBlockInfo {
    uint64_t segment_addr; /* base of the segment the block lies in */
    uint64_t addr;
    uint64_t size;         /* bytes */
    int stream;
    bool allocated;        /* false: a cached free block (or pending free) */
    bool small_pool;
} AllocBlockInfo;

/* Sets *cfg to PyTorch's defaults: caching, unlimited capacity and split size. */
void alloc_config_default(AllocConfig *cfg);

/* Parses a PYTORCH_CUDA_ALLOC_CONF string into cfg (fields not named keep their value).
 * Returns VR_EINVAL with a one-line message in err for an unknown key or bad value. */
VrStatus alloc_config_parse(AllocConfig *cfg, const char *conf, char *err, size_t errlen);

/* round_size(): the bytes a request of `size` occupies under cfg. */
uint64_t alloc_round_size(const AllocConfig *cfg, uint64_t size);

/* Creates an allocator. The caller owns *out and frees it with alloc_free. */
VrStatus alloc_new(const AllocConfig *cfg, Alloc **out /* OUT */);
void alloc_free(Alloc *a); /* NULL is a no-op */

void alloc_set_listener(Alloc *a, AllocListener fn, void *ud);

/* Allocates `size` bytes (unrounded, > 0) on `stream`. addr_hint is 0 in simulation; replay
 * passes the address the real allocator returned, used only when a new segment is needed.
 * Returns VR_OK with *addr set, VR_OOM when PyTorch would raise OutOfMemoryError (after its
 * release-and-retry; num_ooms counts it and alloc_last_oom describes it), VR_ENOMEM if the host
 * ran out of memory. */
VrStatus alloc_malloc(Alloc *a, uint64_t size, int stream, uint64_t addr_hint,
                      uint64_t *addr /* OUT */);

/* Frees the block at addr (free_requested followed by free_completed unless the block has
 * stream uses recorded). VR_EINVAL if addr is not an allocated block. */
VrStatus alloc_dealloc(Alloc *a, uint64_t addr);

/* record_stream(): the block is also used on `stream`; its memory becomes reusable only after
 * alloc_sync (events complete) once it is freed. */
VrStatus alloc_record_stream(Alloc *a, uint64_t addr, int stream);

/* All outstanding stream events complete (a synchronize): pending frees complete. */
void alloc_sync(Alloc *a);

/* torch.cuda.empty_cache(): every cached block that is a whole segment goes back. */
void alloc_empty_cache(Alloc *a);

/* torch.cuda.reset_peak_memory_stats(): peaks := current. */
void alloc_reset_peaks(Alloc *a);

void alloc_stats(const Alloc *a, AllocStats *out /* OUT */);
void alloc_last_oom(const Alloc *a, AllocOomInfo *out /* OUT */);
const AllocConfig *alloc_config(const Alloc *a);

/* Rounded size of the live block at addr, 0 if none. */
uint64_t alloc_block_size(const Alloc *a, uint64_t addr);

/* Stream the live block at addr belongs to (the one it was allocated on), -1 if none. */
int alloc_block_stream(const Alloc *a, uint64_t addr);

/* Copies the segment map into a new array the caller frees with free(). */
VrStatus alloc_segment_map(const Alloc *a, AllocBlockInfo **blocks /* OUT */, size_t *n /* OUT */);

/* A copy of src that the same calls from here on take to the same states: its segments,
 * blocks, pools, events, statistics and counters (its listener is none, and its tree shapes may
 * differ, which no call observes). The caller owns *out (alloc_free). VR_ENOMEM leaves *out
 * NULL. */
VrStatus alloc_clone(const Alloc *src, Alloc **out /* OUT */);

/* Whether the same calls from here on take a and b (one model's states at two moments, or a
 * clone of it) through the same states: the same segments and blocks at the same addresses,
 * pools, events, deferred frees, statistics and placement cursors. The counters that only count
 * (segment allocations and frees, retries, OOMs) may differ; so may the tree shapes. false
 * whenever it cannot tell (a tree deeper than it walks), which costs a caller only a shortcut. */
bool alloc_same_state(const Alloc *a, const Alloc *b);

/* Checks every invariant of the model; VR_OK or VR_EINVAL (for tests). */
VrStatus alloc_check(const Alloc *a);

/* ---- Additions for replay and the engine (sim/replay.c, tests) ---- */

/* free_requested without free_completed: the block stops counting as allocated but its memory
 * stays held (active_pending_free) until alloc_free_complete, or until a synchronize that the
 * allocator does itself (alloc_empty_cache, the release-and-retry before an OOM). Replay uses it
 * when a trace's free_completed does not follow its free_requested at once.
 * VR_EINVAL if addr is not an allocated block. */
VrStatus alloc_free_deferred(Alloc *a, uint64_t addr);

/* free_completed for a block freed with alloc_free_deferred. VR_EINVAL (and no change) if addr is
 * not such a block, e.g. because a synchronize already completed it. */
VrStatus alloc_free_complete(Alloc *a, uint64_t addr);

/* The work recorded so far on `stream` is complete: its events are done; the blocks they held are
 * freed at the start of the next alloc_malloc (as PyTorch's process_events does). */
void alloc_stream_sync(Alloc *a, int stream);

/* Rebuilds a block that was live before a trace began: places an allocated block of `size`
 * (unrounded) at exactly addr on `stream`, carving it out of the free block of a rebuilt segment
 * that contains addr, or else out of a new rebuilt segment (2 MiB aligned in the small pool; in
 * the large pool starting at addr and sized as a new segment for the request would be). Rebuilt
 * segments count in reserved but not in num_segment_allocs and send no listener event. Call it
 * before any alloc_malloc, in ascending address order (faster; any order works).
 * VR_EINVAL if the block would overlap one already placed or another pool's segment, or addr is
 * not 512-aligned; VR_OOM if it would exceed the capacity; VR_ENOMEM on host failure. */
VrStatus alloc_inject(Alloc *a, uint64_t addr, uint64_t size, int stream);

/* alloc_inject where the block is known to occupy `bytes` (a multiple of 512, at least the
 * rounded request: a block served whole from a larger free block occupies all of it); bytes == 0
 * is alloc_inject. */
VrStatus alloc_inject_block(Alloc *a, uint64_t addr, uint64_t size, uint64_t bytes, int stream);

/* Rebuilds a whole free (cached) non-expandable segment [base, base + size) of the small or large
 * pool that existed before a trace began (from a snapshot, or a segment_free of a segment the
 * trace never allocated). Blocks injected afterwards are carved out of it. Counts in reserved,
 * not in num_segment_allocs. VR_EINVAL on overlap or bad arguments, VR_OOM over the capacity,
 * VR_ENOMEM on host failure. A no-op for the ideal allocator. */
VrStatus alloc_inject_segment(Alloc *a, uint64_t base, uint64_t size, int stream, bool small);

/* Cheap readers of current values (the same numbers as alloc_stats, which also walks the free
 * sets for largest_free_block): allocated and reserved bytes, retries. */
uint64_t alloc_allocated_bytes(const Alloc *a);
uint64_t alloc_reserved_bytes(const Alloc *a);
uint64_t alloc_num_alloc_retries(const Alloc *a); /* count */

/* ---- Memory that is not a tensor (docs/allocator.md section 10) ----
 * The capacity the allocator may reserve (AllocConfig.capacity) and the cuBLAS workspace each
 * handle allocates through it are one rule each, in lua/hw/memory.lua (tested by
 * tests/ops/test_rules.lua); the workspace reaches the engine as DeviceSpec.cublas_workspace_bytes. */

/* Writes PyTorch's OutOfMemoryError text for `info` into buf (always NUL-terminated). */
void alloc_format_oom(const AllocOomInfo *info, bool fraction_set, char *buf, size_t len);

/* Writes a PYTORCH_CUDA_ALLOC_CONF string equivalent to cfg's options into buf. */
void alloc_config_format(const AllocConfig *cfg, char *buf, size_t len);

#endif
