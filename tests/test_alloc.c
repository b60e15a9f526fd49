/* test_alloc.c: the caching-allocator model against the rules of docs/allocator.md, "Specification", each with
 * a small hand-made sequence (the "measured" examples included), alloc_check after every step,
 * and fault injection on host allocations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "alloc.h"

#define MiB VR_MIB
#define KiB VR_KIB

typedef struct Fixture {
    Alloc *a;
    AllocConfig cfg;
    int nsegev;           /* listener: segment events seen */
    uint64_t segev[64];   /* their sizes */
    AllocEventKind kinds[64];
} Fixture;

static void listener(void *ud, AllocEventKind kind, uint64_t addr, uint64_t size, int stream)
{
    (void)addr;
    (void)stream;
    Fixture *f = ud;
    if (f->nsegev < 64) {
        f->kinds[f->nsegev] = kind;
        f->segev[f->nsegev] = size;
    }
    f->nsegev++;
}

static Fixture *make(const char *conf, uint64_t capacity)
{
    Fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    alloc_config_default(&f->cfg);
    char err[256];
    assert_int_equal(alloc_config_parse(&f->cfg, conf, err, sizeof err), VR_OK);
    f->cfg.capacity = capacity;
    f->cfg.fraction_set = capacity != 0;
    assert_int_equal(alloc_new(&f->cfg, &f->a), VR_OK);
    alloc_set_listener(f->a, listener, f);
    return f;
}

static void done(Fixture *f)
{
    assert_int_equal(alloc_check(f->a), VR_OK);
    alloc_free(f->a);
    free(f);
}

/* Allocates and checks the invariants. */
static uint64_t m(Fixture *f, uint64_t size, int stream)
{
    uint64_t addr = 0;
    assert_int_equal(alloc_malloc(f->a, size, stream, 0, &addr), VR_OK);
    assert_int_equal(alloc_check(f->a), VR_OK);
    assert_true(addr != 0);
    return addr;
}

static void fr(Fixture *f, uint64_t addr)
{
    assert_int_equal(alloc_dealloc(f->a, addr), VR_OK);
    assert_int_equal(alloc_check(f->a), VR_OK);
}

static AllocStats st(Fixture *f)
{
    AllocStats s;
    alloc_stats(f->a, &s);
    return s;
}

/* ---- section 1: rounding ---- */

static void test_round_default(void **state)
{
    (void)state;
    AllocConfig c;
    alloc_config_default(&c);
    assert_int_equal(alloc_round_size(&c, 1), 512);
    assert_int_equal(alloc_round_size(&c, 511), 512);
    assert_int_equal(alloc_round_size(&c, 512), 512);
    assert_int_equal(alloc_round_size(&c, 513), 1024);
    assert_int_equal(alloc_round_size(&c, MiB + 1), MiB + 512);
}

static void test_round_power2_divisions(void **state)
{
    (void)state;
    AllocConfig c;
    alloc_config_default(&c);
    char err[256];
    assert_int_equal(alloc_config_parse(&c, "roundup_power2_divisions:4", err, sizeof err), VR_OK);
    /* measured with d = 4 */
    assert_int_equal(alloc_round_size(&c, 1200), 1536);
    assert_int_equal(alloc_round_size(&c, MiB + 1), 1310720);
    assert_int_equal(alloc_round_size(&c, 5 * MiB + 1), 6 * MiB);
    assert_int_equal(alloc_round_size(&c, 4 * MiB), 4 * MiB); /* a power of two stays */
    /* d = 1 behaves like 0 */
    alloc_config_default(&c);
    assert_int_equal(alloc_config_parse(&c, "roundup_power2_divisions:1", err, sizeof err), VR_OK);
    assert_int_equal(alloc_round_size(&c, MiB + 1), MiB + 512);
    /* bracket form keyed in MB. PyTorch's parser starts '>' at the last interval listed, so
     * that interval takes the '>' value too: [256:1,512:2,1024:4,>:8] gives 1024 MB 8 */
    alloc_config_default(&c);
    assert_int_equal(alloc_config_parse(&c, "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
                                        err, sizeof err), VR_OK);
    assert_int_equal(c.roundup_power2_divisions[0], 1);  /* below the first key: its value */
    assert_int_equal(c.roundup_power2_divisions[8], 1);  /* 256 MB */
    assert_int_equal(c.roundup_power2_divisions[9], 2);  /* 512 MB */
    assert_int_equal(c.roundup_power2_divisions[10], 8); /* 1024 MB: overwritten by '>' */
    assert_int_equal(c.roundup_power2_divisions[15], 8);
    /* 600 MiB: interval 9 (512 MiB..1 GiB), d = 2: step 256 MiB -> 768 MiB */
    assert_int_equal(alloc_round_size(&c, 600 * MiB), 768 * MiB);
}

static void test_config_errors(void **state)
{
    (void)state;
    AllocConfig c;
    char err[256];
    const char *bad[] = {
        "nonsense:1", "max_split_size_mb:20", "max_split_size_mb:abc",
        "expandable_segments:true", "garbage_collection_threshold:1.5",
        "roundup_power2_divisions:3", "roundup_power2_divisions:[256:3]", "max_split_size_mb",
        "roundup_power2_divisions:[256:1", "max_non_split_rounding_mb:5",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        alloc_config_default(&c);
        AllocConfig before = c;
        assert_int_equal(alloc_config_parse(&c, bad[i], err, sizeof err), VR_EINVAL);
        assert_true(strlen(err) > 0);
        assert_memory_equal(&c, &before, sizeof c); /* unchanged on error */
    }
    alloc_config_default(&c);
    assert_int_equal(alloc_config_parse(&c, "backend:cudaMallocAsync", err, sizeof err),
                     VR_ENOTSUP);
    assert_int_equal(alloc_config_parse(&c, " max_split_size_mb:128 , expandable_segments:True,"
                                            "garbage_collection_threshold:0.6,pinned_use_x:1,"
                                            "backend:native,release_lock_on_cudamalloc:True",
                                        err, sizeof err), VR_OK);
    assert_int_equal(c.max_split_size, 128 * MiB);
    assert_true(c.expandable_segments);
    assert_true(c.gc_threshold > 0.59 && c.gc_threshold < 0.61);
    char buf[256];
    alloc_config_format(&c, buf, sizeof buf);
    assert_non_null(strstr(buf, "max_split_size_mb:128"));
    assert_non_null(strstr(buf, "expandable_segments:True"));
}

/* ---- section 2: pools and segment sizes ---- */

static void test_pools_measured_22mib(void **state)
{
    (void)state;
    Fixture *f = make("", 0);
    m(f, 1, 0);                 /* small pool: 2 MiB segment */
    assert_int_equal(st(f).reserved, 2 * MiB);
    m(f, MiB + 1, 0);           /* large, under 10 MiB: 20 MiB segment */
    assert_int_equal(st(f).reserved, 22 * MiB); /* measured */
    uint64_t x = m(f, 10 * MiB, 0); /* served from the 20 MiB segment's leftover */
    assert_int_equal(st(f).reserved, 22 * MiB);
    assert_int_equal(st(f).num_segment_allocs, 2);
    fr(f, x);
    m(f, 25 * MiB + 1, 0);      /* >= 10 MiB with no fit: its own segment, rounded to 2 MiB */
    assert_int_equal(st(f).reserved, 48 * MiB);
    assert_int_equal(st(f).allocated, 512 + MiB + 512 + 26 * MiB); /* unsplit: whole 26 MiB */
    m(f, 11 * MiB + 1, 0);      /* fits in the 20 MiB segment's leftover */
    assert_int_equal(st(f).reserved, 48 * MiB);
    m(f, 21 * MiB, 0);          /* no fit: a 22 MiB segment */
    assert_int_equal(st(f).reserved, 70 * MiB);
    assert_int_equal(st(f).segments, 4);
    done(f);
}

/* ---- section 3: best fit, streams, oversize ---- */

static void test_best_fit_and_ties(void **state)
{
    (void)state;
    Fixture *f = make("", 0);
    uint64_t a1 = m(f, 30 * MiB, 0);
    uint64_t a2 = m(f, 40 * MiB, 0);
    uint64_t a3 = m(f, 30 * MiB, 0);
    /* 11.3: each new segment below all earlier ones */
    assert_true(a2 < a1 && a3 < a2);
    fr(f, a1);
    fr(f, a2);
    fr(f, a3);
    /* two free 30 MiB blocks: the lower address wins; 35 MiB takes the 40 MiB block */
    assert_int_equal(m(f, 30 * MiB, 0), a3);
    assert_int_equal(m(f, 35 * MiB, 0), a2);
    assert_int_equal(st(f).num_segment_allocs, 3);
    done(f);
}

/* Many free blocks of one size (a pool's free set keeps the lowest-address one of each size as
 * its head and the others beside it): freed in a shuffled order, so that a new free block is now
 * the new lowest and now not, they come back lowest address first; a kept block between every
 * two stops them merging. alloc_check after every step walks both levels. */
static void test_best_fit_many_of_one_size(void **state)
{
    (void)state;
    Fixture *f = make("", 0);
    enum { N = 16 };
    uint64_t x[N];
    for (int i = 0; i < N; i++) {
        x[i] = m(f, 8 * KiB, 0);
        (void)m(f, 8 * KiB, 0); /* the keeper */
    }
    static const int order[N] = {5, 9, 2, 14, 0, 7, 11, 3, 15, 1, 8, 12, 4, 10, 6, 13};
    for (int i = 0; i < N; i++) fr(f, x[order[i]]);
    uint64_t sorted[N];
    memcpy(sorted, x, sizeof sorted);
    for (int i = 1; i < N; i++)
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            uint64_t t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t;
        }
    for (int i = 0; i < N; i++) assert_int_equal(m(f, 8 * KiB, 0), sorted[i]);
    done(f);
}

static void test_streams_do_not_share(void **state)
{
    (void)state;
    Fixture *f = make("", 0);
    uint64_t x = m(f, 30 * MiB, 0);
    fr(f, x);
    uint64_t y = m(f, 30 * MiB, 1); /* stream 1 may not reuse stream 0's block */
    assert_true(y != x);
    assert_int_equal(st(f).reserved, 60 * MiB);
    uint64_t z = m(f, 30 * MiB, 0);
    assert_int_equal(z, x);
    done(f);
}

static void test_max_split_measured(void **state)
{
    (void)state;
    Fixture *f = make("max_split_size_mb:100", 0);
    uint64_t x = m(f, 150 * MiB, 0);
    fr(f, x);
    /* measured: a free 150 MiB block served a 140 MiB request unsplit */
    uint64_t y = m(f, 140 * MiB, 0);
    assert_int_equal(y, x);
    assert_int_equal(st(f).allocated, 150 * MiB);
    assert_int_equal(st(f).reserved, 150 * MiB);
    assert_int_equal(alloc_block_size(f->a, y), 150 * MiB);
    fr(f, y);
    /* a request under M may not take a block of M or more: new segment */
    uint64_t z = m(f, 50 * MiB, 0);
    assert_true(z != x);
    assert_int_equal(st(f).reserved, 200 * MiB);
    /* request >= M but the block >= request + 20 MiB (max_non_split_rounding): miss */
    uint64_t w = m(f, 120 * MiB, 0);
    assert_true(w != x);
    assert_int_equal(st(f).reserved, 320 * MiB);
    done(f);
}

static void test_max_non_split_rounding(void **state)
{
    (void)state;
    Fixture *f = make("max_split_size_mb:100,max_non_split_rounding_mb:40", 0);
    uint64_t x = m(f, 150 * MiB, 0);
    fr(f, x);
    assert_int_equal(m(f, 120 * MiB, 0), x); /* 150 < 120 + 40 */
    done(f);
}

/* ---- section 4: splitting and merging ---- */

static void test_split_rules(void **state)
{
    (void)state;
    Fixture *f = make("", 0);
    uint64_t x = m(f, 5 * MiB, 0); /* 20 MiB segment, split 5 + 15 */
    assert_int_equal(st(f).allocated, 5 * MiB);
    assert_int_equal(st(f).inactive_split, 15 * MiB);
    fr(f, x);                      /* merges back into one 20 MiB block */
    assert_int_equal(st(f).inactive_split, 0);
    /* measured: 19.5 MiB took the free 20 MiB block whole (remaining 0.5 MiB <= 1 MiB) */
    uint64_t y = m(f, 19 * MiB + 512 * KiB, 0);
    assert_int_equal(y, x);
    assert_int_equal(st(f).allocated, 20 * MiB);
    fr(f, y);
    /* remaining exactly 1 MiB: not split (strictly more than 1 MiB needed) */
    y = m(f, 19 * MiB, 0);
    assert_int_equal(st(f).allocated, 20 * MiB);
    fr(f, y);
    /* small pool: any remainder >= 512 splits */
    uint64_t s1 = m(f, 1000, 0), s2 = m(f, 512, 0);
    assert_int_equal(s2, s1 + 1024);
    assert_int_equal(st(f).allocated, 1024 + 512);
    done(f);
}

static void test_merge_both_sides(void **state)
{
    (void)state;
    Fixture *f = make("", 0);
    uint64_t a = m(f, 4 * MiB, 0), b = m(f, 4 * MiB, 0), c = m(f, 4 * MiB, 0);
    assert_int_equal(b, a + 4 * MiB);
    assert_int_equal(c, b + 4 * MiB);
    fr(f, a);
    fr(f, c);
    AllocStats s = st(f);
    assert_int_equal(s.inactive_split, 20 * MiB - 4 * MiB);
    fr(f, b); /* merges with both neighbours and the tail: one whole block */
    s = st(f);
    assert_int_equal(s.inactive_split, 0);
    assert_int_equal(s.largest_free_block, 20 * MiB);
    AllocBlockInfo *map;
    size_t n;
    assert_int_equal(alloc_segment_map(f->a, &map, &n), VR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(map[0].size, 20 * MiB);
    assert_false(map[0].allocated);
    free(map);
    done(f);
}

/* ---- section 5: release, retry, OOM, garbage collection ---- */

static void test_oom_and_retry(void **state)
{
    (void)state;
    Fixture *f = make("", 100 * MiB);
    uint64_t x = m(f, 60 * MiB, 0);
    fr(f, x);
    /* 70 MiB does not fit beside the cached 60 MiB: release it, retry once, succeed */
    uint64_t y = m(f, 70 * MiB, 0);
    AllocStats s = st(f);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_int_equal(s.reserved, 70 * MiB);
    assert_int_equal(s.num_segment_frees, 1);
    /* 40 MiB more cannot fit at all: retry, then OOM */
    uint64_t z = 1;
    assert_int_equal(alloc_malloc(f->a, 40 * MiB, 0, 0, &z), VR_OOM);
    assert_int_equal(z, 0);
    assert_int_equal(alloc_check(f->a), VR_OK);
    s = st(f);
    assert_int_equal(s.num_alloc_retries, 2);
    assert_int_equal(s.num_ooms, 1);
    AllocOomInfo o;
    alloc_last_oom(f->a, &o);
    assert_int_equal(o.requested, 40 * MiB);
    assert_int_equal(o.capacity, 100 * MiB);
    assert_int_equal(o.free, 30 * MiB);
    assert_int_equal(o.allocated, 70 * MiB);
    assert_int_equal(o.reserved_unallocated, 0);
    char msg[512];
    alloc_format_oom(&o, true, msg, sizeof msg);
    assert_non_null(strstr(msg, "Tried to allocate 40.00 MiB"));
    assert_true(f->nsegev >= 4 && f->kinds[f->nsegev - 1] == ALLOC_EV_OOM);
    fr(f, y);
    m(f, 40 * MiB, 0); /* served from the cached 70 MiB block (split) */
    done(f);
}

static void test_release_available_max_split(void **state)
{
    (void)state;
    /* with M set, a miss first frees the smallest cached block >= max(request, M) */
    Fixture *f = make("max_split_size_mb:50", 300 * MiB);
    uint64_t a = m(f, 120 * MiB, 0), b = m(f, 160 * MiB, 0);
    fr(f, a);
    fr(f, b);
    /* 100 MiB: the 120 MiB block is >= 100 + 20 (miss), so is 160. Needs room: 280 + 100 > 300.
     * release_available frees the 120 MiB block (smallest >= 100), no full retry */
    m(f, 100 * MiB, 0);
    AllocStats s = st(f);
    assert_int_equal(s.num_alloc_retries, 0);
    assert_int_equal(s.reserved, 260 * MiB);
    done(f);
}

static void test_garbage_collection(void **state)
{
    (void)state;
    Fixture *f = make("garbage_collection_threshold:0.5", 100 * MiB);
    uint64_t a = m(f, 30 * MiB, 0), b = m(f, 30 * MiB, 0);
    fr(f, a);
    fr(f, b);
    /* reserved 60 MiB > 50 MiB threshold; a miss (stream 1) collects whole free blocks at least
     * as old (in pool searches) as the average: both, in one pass, though 10 MiB would do */
    m(f, 30 * MiB, 1);
    AllocStats s = st(f);
    assert_int_equal(s.num_alloc_retries, 0);
    assert_int_equal(s.num_segment_frees, 2);
    assert_int_equal(s.reserved, 30 * MiB);
    /* under the threshold nothing is collected */
    uint64_t c = m(f, 10 * MiB, 0);
    fr(f, c);
    m(f, 12 * MiB, 1);
    assert_int_equal(st(f).num_segment_frees, 2);
    done(f);
}

static void test_empty_cache(void **state)
{
    (void)state;
    Fixture *f = make("", 0);
    uint64_t a = m(f, 30 * MiB, 0), b = m(f, 5 * MiB, 0), c = m(f, 100, 0);
    (void)c;
    uint64_t d = m(f, 5 * MiB, 0); /* shares b's 20 MiB segment */
    fr(f, a);
    fr(f, b);
    alloc_empty_cache(f->a); /* only the whole free 30 MiB segment goes */
    assert_int_equal(alloc_check(f->a), VR_OK);
    AllocStats s = st(f);
    assert_int_equal(s.reserved, 22 * MiB);
    assert_int_equal(s.segments, 2);
    fr(f, d);
    alloc_empty_cache(f->a);
    assert_int_equal(st(f).reserved, 2 * MiB);
    done(f);
}

/* ---- section 6: expandable segments ---- */

static void test_expandable_measured_42mib(void **state)
{
    (void)state;
    Fixture *f = make("expandable_segments:True", 0);
    m(f, 1, 0);
    assert_int_equal(st(f).reserved, 2 * MiB);
    m(f, MiB + 1, 0);
    assert_int_equal(st(f).reserved, 22 * MiB);
    m(f, 30 * MiB, 0);
    assert_int_equal(st(f).reserved, 42 * MiB); /* measured; 52 MiB without */
    AllocStats s = st(f);
    assert_int_equal(s.segments, 0);               /* segment.* stays 0 (11.6) */
    assert_int_equal(s.num_segment_allocs, 3);     /* three page maps */
    assert_int_equal(f->kinds[0], ALLOC_EV_SEGMENT_MAP);
    done(f);
    f = make("", 0);
    m(f, 1, 0);
    m(f, MiB + 1, 0);
    m(f, 30 * MiB, 0);
    assert_int_equal(st(f).reserved, 52 * MiB);
    done(f);
}

static void test_expandable_unmap_whole_pages(void **state)
{
    (void)state;
    Fixture *f = make("expandable_segments:True", 0);
    uint64_t a = m(f, 30 * MiB, 0); /* maps 2 pages = 40 MiB */
    uint64_t b = m(f, 5 * MiB, 0);  /* from the 10 MiB left in page 2 */
    assert_int_equal(st(f).reserved, 40 * MiB);
    assert_int_equal(b, a + 30 * MiB);
    fr(f, a);
    /* free [0, 30 MiB): only page 1 (0..20 MiB) lies entirely inside it */
    alloc_empty_cache(f->a);
    assert_int_equal(alloc_check(f->a), VR_OK);
    assert_int_equal(st(f).reserved, 20 * MiB);
    assert_int_equal(st(f).num_segment_unmaps, 1);
    fr(f, b);
    alloc_empty_cache(f->a);
    assert_int_equal(st(f).reserved, 0);
    /* the next alloc maps again */
    m(f, 3 * MiB, 0);
    assert_int_equal(st(f).reserved, 20 * MiB);
    done(f);
}

/* 6.4: a best fit that lies in an expandable segment gives way to the next larger candidate
 * while that one's size plus the unmapped space after it is smaller. */
static void test_expandable_search_rule(void **state)
{
    (void)state;
    Fixture *f = make("expandable_segments:True", 0);
    uint64_t x = m(f, 12 * MiB, 0);  /* page 1: [0, 12) */
    uint64_t y = m(f, 8 * MiB, 0);   /* page 1: [12, 20) */
    uint64_t z = m(f, 10 * MiB, 0);  /* page 2: [20, 30), free [30, 40) before unmapped space */
    assert_int_equal(y, x + 12 * MiB);
    assert_int_equal(z, x + 20 * MiB);
    fr(f, x);                        /* free [0, 12): 12 MiB, an allocated block after it */
    /* plain best fit would take the 10 MiB block at 30 MiB; the rule takes the 12 MiB one */
    assert_int_equal(m(f, 9 * MiB, 0), x);
    assert_int_equal(st(f).reserved, 40 * MiB);
    done(f);
}

static void test_expandable_split_ignores_max_split(void **state)
{
    (void)state;
    Fixture *f = make("expandable_segments:True,max_split_size_mb:100", 0);
    uint64_t a = m(f, 150 * MiB, 0); /* maps 8 pages = 160 MiB, split: remainder 10 MiB free */
    assert_int_equal(st(f).reserved, 160 * MiB);
    assert_int_equal(st(f).allocated, 150 * MiB);
    uint64_t b = m(f, 10 * MiB, 0);
    assert_int_equal(b, a + 150 * MiB);
    assert_int_equal(st(f).reserved, 160 * MiB);
    done(f);
}

static void test_expandable_capacity(void **state)
{
    (void)state;
    Fixture *f = make("expandable_segments:True", 60 * MiB);
    uint64_t a = m(f, 30 * MiB, 0); /* 40 MiB mapped */
    (void)a;
    uint64_t z;
    /* 25 MiB more needs 20 MiB cap check (alloc_size 26 MiB -> 40 + 26 > 60): fails */
    assert_int_equal(alloc_malloc(f->a, 25 * MiB, 0, 0, &z), VR_OOM);
    assert_int_equal(alloc_check(f->a), VR_OK);
    assert_int_equal(st(f).num_ooms, 1);
    m(f, 10 * MiB, 0); /* fits in the mapped 10 MiB */
    done(f);
}

/* ---- section 7: streams and events ---- */

static void test_record_stream(void **state)
{
    (void)state;
    Fixture *f = make("", 0);
    uint64_t x = m(f, 30 * MiB, 0);
    assert_int_equal(alloc_record_stream(f->a, x, 1), VR_OK);
    assert_int_equal(alloc_record_stream(f->a, x, 0), VR_OK); /* own stream: no use */
    fr(f, x);
    AllocStats s = st(f);
    assert_int_equal(s.allocated, 0);
    assert_int_equal(s.active, 30 * MiB); /* active_pending_free */
    /* not reusable yet */
    uint64_t y = m(f, 30 * MiB, 0);
    assert_true(y != x);
    assert_int_equal(st(f).reserved, 60 * MiB);
    /* measured: free_completed only after a synchronize plus the next allocation */
    alloc_sync(f->a);
    assert_int_equal(st(f).active, 60 * MiB);
    uint64_t w = m(f, 30 * MiB, 0);
    assert_int_equal(w, x);
    assert_int_equal(st(f).reserved, 60 * MiB);
    assert_int_equal(alloc_record_stream(f->a, 12345, 1), VR_EINVAL);
    done(f);
}

static void test_stream_sync_and_empty_cache_waits(void **state)
{
    (void)state;
    Fixture *f = make("", 0);
    uint64_t x = m(f, 30 * MiB, 0), y = m(f, 30 * MiB, 0);
    alloc_record_stream(f->a, x, 1);
    alloc_record_stream(f->a, y, 2);
    fr(f, x);
    fr(f, y);
    alloc_stream_sync(f->a, 1);
    uint64_t z = m(f, 30 * MiB, 0); /* x's event done: reused; y's not */
    assert_int_equal(z, x);
    assert_int_equal(st(f).active, 60 * MiB);
    alloc_empty_cache(f->a);         /* waits on every event: y freed and released */
    assert_int_equal(alloc_check(f->a), VR_OK);
    assert_int_equal(st(f).reserved, 30 * MiB);
    done(f);
}

static void test_free_deferred(void **state)
{
    (void)state;
    Fixture *f = make("", 0);
    uint64_t x = m(f, 30 * MiB, 0);
    assert_int_equal(alloc_free_deferred(f->a, x), VR_OK);
    assert_int_equal(alloc_check(f->a), VR_OK);
    assert_int_equal(alloc_dealloc(f->a, x), VR_EINVAL); /* double free */
    assert_int_equal(st(f).active, 30 * MiB);
    assert_int_equal(alloc_free_complete(f->a, x), VR_OK);
    assert_int_equal(alloc_check(f->a), VR_OK);
    assert_int_equal(alloc_free_complete(f->a, x), VR_EINVAL);
    assert_int_equal(st(f).active, 0);
    /* with a stream use too: it waits for both the event and free_completed */
    x = m(f, 30 * MiB, 0);
    alloc_record_stream(f->a, x, 2);
    assert_int_equal(alloc_free_deferred(f->a, x), VR_OK);
    assert_int_equal(alloc_free_complete(f->a, x), VR_OK);
    assert_int_equal(alloc_check(f->a), VR_OK);
    assert_int_equal(st(f).active, 30 * MiB); /* the stream-2 event is still outstanding */
    alloc_sync(f->a);
    uint64_t y = m(f, 30 * MiB, 0);
    assert_int_equal(y, x);
    fr(f, y);
    x = m(f, 30 * MiB, 0);
    alloc_record_stream(f->a, x, 3);
    alloc_free_deferred(f->a, x);
    alloc_empty_cache(f->a); /* a synchronize completes it */
    assert_int_equal(st(f).reserved, 0);
    assert_int_equal(alloc_free_complete(f->a, x), VR_EINVAL);
    done(f);
}

/* ---- misc: bad input, peaks, ideal, inject, hints ---- */

static void test_bad_input(void **state)
{
    (void)state;
    Fixture *f = make("", 0);
    uint64_t z;
    assert_int_equal(alloc_malloc(f->a, 0, 0, 0, &z), VR_EINVAL);
    assert_int_equal(alloc_malloc(f->a, ALLOC_MAX_REQUEST + 1, 0, 0, &z), VR_EINVAL);
    assert_int_equal(alloc_malloc(f->a, 10, -1, 0, &z), VR_EINVAL);
    assert_int_equal(alloc_dealloc(f->a, 4096), VR_EINVAL);
    done(f);
    /* with a capacity, a request beyond any card is an OOM, as PyTorch reports it */
    f = make("", (uint64_t)80 << 30);
    assert_int_equal(alloc_malloc(f->a, ALLOC_MAX_REQUEST + 1, 0, 0, &z), VR_OOM);
    assert_int_equal(st(f).num_ooms, 1);
    assert_int_equal(alloc_block_size(f->a, 4096), 0);
    alloc_free(NULL);
    done(f);
}

static void test_peaks(void **state)
{
    (void)state;
    Fixture *f = make("", 0);
    uint64_t x = m(f, 30 * MiB, 0);
    fr(f, x);
    AllocStats s = st(f);
    assert_int_equal(s.allocated_peak, 30 * MiB);
    assert_int_equal(s.requested_peak, 30 * MiB);
    alloc_reset_peaks(f->a);
    s = st(f);
    assert_int_equal(s.allocated_peak, 0);
    assert_int_equal(s.reserved_peak, 30 * MiB);
    done(f);
}

static void test_ideal(void **state)
{
    (void)state;
    Fixture *f = calloc(1, sizeof *f);
    alloc_config_default(&f->cfg);
    f->cfg.kind = ALLOC_IDEAL;
    f->cfg.capacity = 10 * MiB;
    assert_int_equal(alloc_new(&f->cfg, &f->a), VR_OK);
    uint64_t a = m(f, 1, 0), b = m(f, 3 * MiB + 1, 0);
    AllocStats s = st(f);
    assert_int_equal(s.allocated, 512 + 3 * MiB + 512);
    assert_int_equal(s.reserved, s.allocated);
    uint64_t z;
    assert_int_equal(alloc_malloc(f->a, 7 * MiB, 0, 0, &z), VR_OOM);
    fr(f, a);
    fr(f, b);
    assert_int_equal(st(f).reserved, 0);
    done(f);
}

static void test_hint_placement(void **state)
{
    (void)state;
    Fixture *f = make("", 0);
    uint64_t base = (uint64_t)0x7e0000000000;
    uint64_t a;
    assert_int_equal(alloc_malloc(f->a, 30 * MiB, 0, base, &a), VR_OK);
    assert_int_equal(a, base); /* 11.2: the segment starts at the alloc's address */
    uint64_t b;
    /* a hint inside the first segment overlaps it: placed below all */
    assert_int_equal(alloc_malloc(f->a, 30 * MiB, 0, base + 4 * MiB, &b), VR_OK);
    assert_true(b + 30 * MiB <= base);
    assert_int_equal(alloc_check(f->a), VR_OK);
    done(f);
}

static void test_inject(void **state)
{
    (void)state;
    Fixture *f = make("", 0);
    uint64_t base = (uint64_t)0x7e0000000000;
    /* three small blocks in one 2 MiB segment, and a large block */
    assert_int_equal(alloc_inject(f->a, base + 512, 100, 0), VR_OK);
    assert_int_equal(alloc_inject(f->a, base + 4096, 1000, 0), VR_OK);
    assert_int_equal(alloc_inject(f->a, base + 8192, 512, 0), VR_OK);
    assert_int_equal(alloc_inject(f->a, base + 64 * MiB, 30 * MiB, 0), VR_OK);
    assert_int_equal(alloc_check(f->a), VR_OK);
    AllocStats s = st(f);
    assert_int_equal(s.reserved, 2 * MiB + 30 * MiB);
    assert_int_equal(s.num_segment_allocs, 0);
    assert_int_equal(s.injected_segments, 2);
    /* a small block in the first 2 MiB of the address space: its segment may not start at 0 */
    assert_int_equal(alloc_inject(f->a, 1024, 100, 0), VR_OK);
    assert_int_equal(alloc_check(f->a), VR_OK);
    fr(f, 1024);
    /* overlapping, misaligned or cross-pool blocks are refused */
    assert_int_equal(alloc_inject(f->a, base + 4096, 512, 0), VR_EINVAL);
    assert_int_equal(alloc_inject(f->a, base + 100, 512, 0), VR_EINVAL);
    assert_int_equal(alloc_inject(f->a, base + 1 * MiB, 3 * MiB, 0), VR_EINVAL);
    assert_int_equal(alloc_check(f->a), VR_OK);
    /* a rebuilt whole free segment serves a block carved at its address, and new allocs */
    assert_int_equal(alloc_inject_segment(f->a, base + 256 * MiB, 64 * MiB, 0, false), VR_OK);
    assert_int_equal(alloc_inject_segment(f->a, base + 256 * MiB, 2 * MiB, 0, true), VR_EINVAL);
    assert_int_equal(alloc_inject_block(f->a, base + 260 * MiB, 19 * MiB + 1, 20 * MiB, 0), VR_OK);
    assert_int_equal(alloc_block_size(f->a, base + 260 * MiB), 20 * MiB);
    assert_int_equal(alloc_check(f->a), VR_OK);
    uint64_t g = m(f, 4 * MiB, 0); /* best fit: the 4 MiB gap in front of the carved block */
    assert_int_equal(g, base + 256 * MiB);
    fr(f, g);
    fr(f, base + 260 * MiB);
    fr(f, base + 4096);
    fr(f, base + 512);
    fr(f, base + 8192);
    fr(f, base + 64 * MiB);
    alloc_empty_cache(f->a);
    assert_int_equal(st(f).reserved, 0);
    done(f);
}

/* ---- section 10: memory that is not a tensor ---- */

/* The cuBLAS workspace (32 MiB on an H200; its size is lua/hw/memory.lua's rule) is an ordinary
 * cached allocation: served from a free block when one fits. */
static void test_not_a_tensor(void **state)
{
    (void)state;
    Fixture *fx = make("", 0);
    uint64_t a = m(fx, 40 * MiB, 0);
    fr(fx, a);
    assert_int_equal(m(fx, 33554432, 0), a);
    assert_int_equal(st(fx).num_segment_allocs, 1);
    done(fx);
}

/* ---- host allocation failure: fail the Nth allocation, every N ---- */

typedef struct Hook {
    long n;    /* calls so far */
    long fail; /* the call that fails (and every later one while `sticky`) */
    bool sticky;
} Hook;

static void *hook_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    (void)osize;
    Hook *h = ud;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    long i = h->n++;
    if (i == h->fail || (h->sticky && i > h->fail))
        return NULL;
    return realloc(ptr, nsize);
}

/* A sequence touching every path that allocates host memory. Returns whether a step ran out. */
static bool workload(Alloc *a, bool expandable)
{
    bool failed = false;
    uint64_t addr[600];
    int n = 0;
    for (int i = 0; i < 600; i++) {
        uint64_t size = (uint64_t)((i * 7919) % 4000 + 1) * (i % 3 == 0 ? 1 : 9000);
        VrStatus s = alloc_malloc(a, size, i % 2, 0, &addr[n]);
        assert_true(s == VR_OK || s == VR_ENOMEM || s == VR_OOM);
        assert_int_equal(alloc_check(a), VR_OK);
        if (s == VR_OK) {
            if (i % 5 == 0) {
                VrStatus r = alloc_record_stream(a, addr[n], 3);
                assert_true(r == VR_OK || r == VR_ENOMEM);
                failed |= r == VR_ENOMEM;
            }
            n++;
        }
        failed |= s == VR_ENOMEM;
        if (i % 3 == 2 && n > 0) {
            VrStatus d = alloc_dealloc(a, addr[--n]);
            assert_true(d == VR_OK || d == VR_ENOMEM);
            if (d == VR_ENOMEM) {
                failed = true;
                n++;
            }
            assert_int_equal(alloc_check(a), VR_OK);
        }
        if (i % 97 == 0) {
            alloc_sync(a);
            alloc_empty_cache(a);
            assert_int_equal(alloc_check(a), VR_OK);
        }
    }
    (void)expandable;
    return failed;
}

static void run_faults(const char *conf, uint64_t capacity)
{
    for (long k = 0;; k++) {
        Hook h = {0, k, true};
        AllocConfig c;
        alloc_config_default(&c);
        char err[128];
        assert_int_equal(alloc_config_parse(&c, conf, err, sizeof err), VR_OK);
        c.capacity = capacity;
        c.fraction_set = capacity != 0;
        c.host_alloc = hook_alloc;
        c.host_ud = &h;
        Alloc *a;
        VrStatus s = alloc_new(&c, &a);
        if (s == VR_ENOMEM)
            continue;
        assert_int_equal(s, VR_OK);
        bool failed = workload(a, c.expandable_segments);
        assert_int_equal(alloc_check(a), VR_OK);
        alloc_free(a); /* ASan's leak checker proves nothing is lost */
        if (!failed && h.n <= k)
            break; /* the whole workload ran without reaching the failing call */
        if (k > 400)
            break;
    }
}

static void test_host_failure(void **state)
{
    (void)state;
    run_faults("", 0);
    run_faults("expandable_segments:True", 0);
    run_faults("max_split_size_mb:30,garbage_collection_threshold:0.5", 600 * MiB);
}

/* alloc_clone: a copy taken in the middle of a random run (mallocs on two streams, frees,
 * deferred frees completed or not, record_stream, stream syncs, empty_cache, under capacity
 * pressure) answers the rest of the run exactly as the original does: the same addresses and
 * statuses, the same statistics and segment map after every call, and every invariant holds;
 * alloc_same_state says so after every call, and says not once only one of them made a call. */
static void same_state(Alloc *a, Alloc *b)
{
    AllocStats x, y;
    alloc_stats(a, &x);
    alloc_stats(b, &y);
    assert_memory_equal(&x, &y, sizeof x);
    AllocBlockInfo *ma = NULL, *mb = NULL;
    size_t na = 0, nb = 0;
    assert_int_equal(alloc_segment_map(a, &ma, &na), VR_OK);
    assert_int_equal(alloc_segment_map(b, &mb, &nb), VR_OK);
    assert_int_equal(na, nb);
    for (size_t i = 0; i < na; i++) {
        assert_int_equal(ma[i].segment_addr, mb[i].segment_addr);
        assert_int_equal(ma[i].addr, mb[i].addr);
        assert_int_equal(ma[i].size, mb[i].size);
        assert_int_equal(ma[i].stream, mb[i].stream);
        assert_int_equal(ma[i].allocated, mb[i].allocated);
        assert_int_equal(ma[i].small_pool, mb[i].small_pool);
    }
    free(ma);
    free(mb);
    assert_int_equal(alloc_check(b), VR_OK);
}

static uint32_t xs(uint32_t *r)
{
    *r ^= *r << 13;
    *r ^= *r >> 17;
    *r ^= *r << 5;
    return *r;
}

/* One random call on both allocators (live: the addresses allocated, *n of them). */
static void random_call(Alloc *a, Alloc *b, uint32_t *r, uint64_t *live, int *n, int *deferred)
{
    uint32_t k = xs(r) % 100;
    if (k < 50 || *n == 0) {
        static const uint64_t sizes[] = {1, 512, 4000, 70 * KiB, 1 * MiB, 3 * MiB, 11 * MiB, 25 * MiB,
                                         90 * MiB};
        uint64_t sz = sizes[xs(r) % 9] + xs(r) % 5000;
        int stream = (int)(xs(r) % 2);
        uint64_t pa = 0, pb = 0;
        VrStatus sa = alloc_malloc(a, sz, stream, 0, &pa), sb = alloc_malloc(b, sz, stream, 0, &pb);
        assert_int_equal(sa, sb);
        if (sa == VR_OK) {
            assert_int_equal(pa, pb);
            if (*n < 400) live[(*n)++] = pa;
        }
        return;
    }
    int i = (int)(xs(r) % (uint32_t)*n);
    uint64_t addr = live[i];
    if (k < 80) {
        live[i] = live[--*n];
        assert_int_equal(alloc_dealloc(a, addr), alloc_dealloc(b, addr));
    } else if (k < 86) {
        live[i] = live[--*n];
        assert_int_equal(alloc_free_deferred(a, addr), alloc_free_deferred(b, addr));
        if (*deferred < 0) *deferred = 0;
        live[400 + (*deferred)++ % 40] = addr;
    } else if (k < 90 && *deferred > 0) {
        uint64_t d = live[400 + (int)(xs(r) % (uint32_t)(*deferred < 40 ? *deferred : 40))];
        assert_int_equal(alloc_free_complete(a, d), alloc_free_complete(b, d));
    } else if (k < 94) {
        int stream = 1 + (int)(xs(r) % 2);
        assert_int_equal(alloc_record_stream(a, addr, stream), alloc_record_stream(b, addr, stream));
    } else if (k < 97) {
        int stream = (int)(xs(r) % 3);
        alloc_stream_sync(a, stream);
        alloc_stream_sync(b, stream);
    } else if (k < 99) {
        alloc_empty_cache(a);
        alloc_empty_cache(b);
    } else {
        alloc_reset_peaks(a);
        alloc_reset_peaks(b);
    }
}

static void test_clone(void **state)
{
    (void)state;
    static const char *const confs[] = {"", "expandable_segments:True", "max_split_size_mb:40",
                                        "garbage_collection_threshold:0.6,max_split_size_mb:64",
                                        "roundup_power2_divisions:4"};
    for (int c = 0; c < 6; c++) {
        for (uint32_t seed = 1; seed <= 4; seed++) {
            AllocConfig cfg;
            alloc_config_default(&cfg);
            char err[256];
            if (c < 5) assert_int_equal(alloc_config_parse(&cfg, confs[c], err, sizeof err), VR_OK);
            else cfg.kind = ALLOC_IDEAL;
            cfg.capacity = 600 * MiB;
            cfg.fraction_set = true;
            Alloc *a = NULL, *b = NULL, *t = NULL;
            assert_int_equal(alloc_new(&cfg, &a), VR_OK);
            assert_int_equal(alloc_new(&cfg, &t), VR_OK); /* a stand-in for the first half */
            uint64_t live[440];
            int n = 0, deferred = -1;
            uint32_t r = seed * 2654435761u;
            for (int i = 0; i < 600; i++) random_call(a, t, &r, live, &n, &deferred);
            alloc_free(t);
            assert_int_equal(alloc_clone(a, &b), VR_OK);
            same_state(a, b);
            assert_true(alloc_same_state(a, b));
            for (int i = 0; i < 1500; i++) {
                random_call(a, b, &r, live, &n, &deferred);
                same_state(a, b);
                assert_true(alloc_same_state(a, b) && alloc_same_state(b, a));
            }
            /* a call on one of them only: they differ until the other makes it too */
            uint64_t pa = 0, pb = 0;
            if (alloc_malloc(a, 3 * MiB + 7, 1, 0, &pa) == VR_OK) {
                assert_false(alloc_same_state(a, b));
                assert_int_equal(alloc_malloc(b, 3 * MiB + 7, 1, 0, &pb), VR_OK);
                assert_true(alloc_same_state(a, b));
                alloc_dealloc(a, pa);
                assert_false(alloc_same_state(a, b));
                alloc_dealloc(b, pb);
                assert_true(alloc_same_state(a, b));
            }
            alloc_free(a);
            alloc_free(b);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_default),
        cmocka_unit_test(test_round_power2_divisions),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_pools_measured_22mib),
        cmocka_unit_test(test_best_fit_and_ties),
        cmocka_unit_test(test_best_fit_many_of_one_size),
        cmocka_unit_test(test_streams_do_not_share),
        cmocka_unit_test(test_max_split_measured),
        cmocka_unit_test(test_max_non_split_rounding),
        cmocka_unit_test(test_split_rules),
        cmocka_unit_test(test_merge_both_sides),
        cmocka_unit_test(test_oom_and_retry),
        cmocka_unit_test(test_release_available_max_split),
        cmocka_unit_test(test_garbage_collection),
        cmocka_unit_test(test_empty_cache),
        cmocka_unit_test(test_expandable_measured_42mib),
        cmocka_unit_test(test_expandable_unmap_whole_pages),
        cmocka_unit_test(test_expandable_search_rule),
        cmocka_unit_test(test_expandable_split_ignores_max_split),
        cmocka_unit_test(test_expandable_capacity),
        cmocka_unit_test(test_record_stream),
        cmocka_unit_test(test_stream_sync_and_empty_cache_waits),
        cmocka_unit_test(test_free_deferred),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_peaks),
        cmocka_unit_test(test_ideal),
        cmocka_unit_test(test_hint_placement),
        cmocka_unit_test(test_inject),
        cmocka_unit_test(test_not_a_tensor),
        cmocka_unit_test(test_host_failure),
        cmocka_unit_test(test_clone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
