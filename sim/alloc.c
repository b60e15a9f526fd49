/* alloc.c: a model of PyTorch's CUDACachingAllocator (docs/allocator.md, "Specification", is the spec; section
 * numbers below refer to it) and an ideal exact-bytes allocator behind the same interface.
 *
 * Data model
 * ----------
 *   Alloc ─┬─ Segment: one per cudaMalloc, or one per expandable address range; a treap `segs`
 *          │    keyed by base address. Its blocks tile [base, base + size) in address order,
 *          │    linked by prev/next, starting at seg->head.
 *          ├─ Pool small (rounded size <= 1 MiB) and Pool large, each with
 *          │    free:     FREE blocks ordered (stream, size, addr)  (PyTorch's pool.blocks), in two
 *          │              levels (the free set, below)
 *          │    unmapped: treap of UNMAPPED blocks keyed (stream, 0, addr) (pool.unmapped)
 *          ├─ live: hash map (u64map.h) addr -> Block for ALLOCATED and PENDING blocks
 *          ├─ ev:   FIFO of stream events (block, stream, done) recorded by frees of blocks that
 *          │        have record_stream uses; `deferred`: blocks freed by alloc_free_deferred
 *          └─ spare Block / Segment structs, so that no step fails half-done on host memory
 *
 * Every block is in exactly one state:
 *   ALLOCATED  allocated = 1                                  in live
 *   PENDING    allocated = 0, event_count > 0                 in live, and in ev or deferred
 *   FREE       allocated = 0, event_count = 0, mapped = 1     in its pool's free set
 *   UNMAPPED   mapped = 0 (expandable segments only)          in its pool's unmapped set
 *
 * Invariants (alloc_check verifies every one):
 *   blocks tile each segment:   head.addr == base, b.addr + b.size == b.next.addr,
 *                               last.addr + last.size == base + size, all sizes % 512 == 0
 *   reserved       == Σ non-expandable segment sizes + Σ mapped blocks of expandable segments
 *                  == allocated + Σ FREE sizes + Σ PENDING sizes
 *   active         == allocated + Σ PENDING sizes
 *   allocated      == Σ ALLOCATED sizes;    requested == Σ requests of ALLOCATED and PENDING
 *   inactive_split == Σ FREE sizes in non-expandable segments of more than one block
 *   segments       == number of non-expandable segments
 *   |live|         == #ALLOCATED + #PENDING;   |free| == #FREE;   |unmapped| == #UNMAPPED
 *   no two FREE blocks, and no two UNMAPPED blocks, are neighbours (frees merge)
 *   mapped/unmapped boundaries of an expandable segment lie on page boundaries
 *   capacity == 0 || reserved <= capacity
 * Ideal allocator: every block is ALLOCATED, in live only; reserved == allocated.
 *
 * Addresses: with no hint, each new segment goes below all earlier ones (11.3), on a 32 MiB
 * boundary when larger than 2 MiB, else on a 2 MiB one. With a hint (replay, 11.2) it goes at
 * the hint unless that range overlaps a segment already modelled.
 */
#include "alloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "u64map.h"

/* Section 0 constants. */
#define K_MIN_BLOCK ((uint64_t)512)
#define K_SMALL_SIZE ((uint64_t)1048576)
#define K_SMALL_BUFFER ((uint64_t)2097152)
#define K_MIN_LARGE_ALLOC ((uint64_t)10485760)
#define K_LARGE_BUFFER ((uint64_t)20971520)
#define K_ROUND_LARGE ((uint64_t)2097152)

#define SIM_TOP ((uint64_t)0x7f0000000000)   /* first simulated segment ends below this */
#define SIM_FLOOR ((uint64_t)1 << 32)         /* simulated segments stay above this */
#define ADDR_LIMIT ((uint64_t)1 << 62)        /* hinted segments must end below this */
#define DEFAULT_VA ((uint64_t)9 << 34)        /* expandable address space when capacity is 0:
                                                 9/8 of 128 GiB, about what a real GPU gives */
#define SLAB_BLOCKS 256

/* ---- treap: an intrusive balanced search tree keyed (k0, k1, k2), iterative ---- */

typedef struct TNode {
    struct TNode *l, *r; /* children */
    uint64_t k0, k1, k2; /* key, compared lexicographically */
    uint32_t prio;       /* heap priority: parent >= child */
} TNode;

static inline bool key_lt(uint64_t a0, uint64_t a1, uint64_t a2, uint64_t b0, uint64_t b1,
                          uint64_t b2)
{
    /* k0 (a stream) is nearly always equal within a pool: one predictable branch, then (k1, k2)
     * as one 128-bit compare instead of two more branches the predictor cannot learn (replay of
     * the largest trace: 7-8 % less CPU time, tests/bench.sh) */
    __extension__ typedef unsigned __int128 u128;
    return a0 != b0 ? a0 < b0 : ((u128)a1 << 64 | a2) < ((u128)b1 << 64 | b2);
}
#define NODE_LT(a, b) key_lt((a)->k0, (a)->k1, (a)->k2, (b)->k0, (b)->k1, (b)->k2)

/* Asks for both children's cache lines before the compare that picks one: a descent is a chain
 * of dependent loads, and a pool's few hundred free blocks sit in L2, not L1 (replay of the
 * largest trace: 4-5 % more events/s, tests/bench.sh). A prefetch of NULL does not fault. */
static inline void prefetch_children(const TNode *t)
{
    __builtin_prefetch(t->l);
    __builtin_prefetch(t->r);
}

/* Splits t into nodes < key (*l) and nodes >= key (*r). */
static void t_split(TNode *t, const TNode *key, TNode **l, TNode **r)
{
    TNode **lp = l, **rp = r;
    while (t) {
        prefetch_children(t);
        if (NODE_LT(t, key)) {
            *lp = t;
            lp = &t->r;
            t = t->r;
        } else {
            *rp = t;
            rp = &t->l;
            t = t->l;
        }
    }
    *lp = *rp = NULL;
}

/* Joins a and b, every key of a < every key of b. */
static TNode *t_merge(TNode *a, TNode *b)
{
    TNode *root = NULL, **p = &root;
    while (a && b) {
        if (a->prio > b->prio) {
            *p = a;
            p = &a->r;
            a = a->r;
        } else {
            *p = b;
            p = &b->l;
            b = b->l;
        }
    }
    *p = a ? a : b;
    return root;
}

/* Inserts n (key and prio set, key not present). */
static void t_insert(TNode **root, TNode *n)
{
    TNode **p = root;
    while (*p && (*p)->prio >= n->prio) {
        prefetch_children(*p);
        p = NODE_LT(n, *p) ? &(*p)->l : &(*p)->r;
    }
    t_split(*p, n, &n->l, &n->r);
    *p = n;
}

/* Removes n, which must be in the tree. */
static void t_erase(TNode **root, TNode *n)
{
    TNode **p = root;
    while (*p != n)
        p = NODE_LT(n, *p) ? &(*p)->l : &(*p)->r;
    *p = t_merge(n->l, n->r);
}

/* First node with key >= (k0,k1,k2), or NULL. */
static TNode *t_lower(TNode *t, uint64_t k0, uint64_t k1, uint64_t k2)
{
    TNode *best = NULL;
    while (t) {
        if (key_lt(t->k0, t->k1, t->k2, k0, k1, k2)) {
            t = t->r;
        } else {
            best = t;
            t = t->l;
        }
    }
    return best;
}

/* Last node with key < (k0,k1,k2), or NULL. */
static TNode *t_below(TNode *t, uint64_t k0, uint64_t k1, uint64_t k2)
{
    TNode *best = NULL;
    while (t) {
        if (key_lt(t->k0, t->k1, t->k2, k0, k1, k2)) {
            best = t;
            t = t->r;
        } else {
            t = t->l;
        }
    }
    return best;
}

static TNode *t_next(TNode *root, const TNode *n)
{
    return t_lower(root, n->k0, n->k1, n->k2 + 1);
}

static TNode *t_first(TNode *t)
{
    while (t && t->l)
        t = t->l;
    return t;
}

static TNode *t_last(TNode *t)
{
    while (t && t->r)
        t = t->r;
    return t;
}

/* ---- model types ---- */

typedef struct Segment Segment;

typedef enum Where { IN_NONE = 0, IN_FREE, IN_UNMAPPED } Where;

typedef struct Block {
    TNode node;              /* membership of a pool's free or unmapped set (see `where`) */
    uint64_t addr;           /* simulated device address */
    uint64_t size;           /* bytes, multiple of 512 */
    uint64_t requested;      /* unrounded request, bytes (ALLOCATED and PENDING only) */
    uint64_t gc_base;        /* pool->gc_calls when last inserted into the free set */
    struct Block *prev, *next; /* address neighbours inside the segment; next: spare list link */
    struct Block *dprev, *dnext; /* list of deferred blocks (alloc_free_deferred) */
    Segment *seg;            /* segment the block lies in */
    int *uses;               /* record_stream streams (capacity capuses, kept on recycle) */
    uint32_t nuses, capuses; /* counts */
    uint32_t event_count;    /* outstanding events, +1 while deferred */
    int stream;              /* stream the block belongs to */
    uint8_t allocated;       /* ALLOCATED */
    uint8_t mapped;          /* 0 only for UNMAPPED expandable ranges */
    uint8_t where;           /* Where */
    uint8_t deferred;        /* on the deferred list */
    uint8_t head;            /* IN_FREE: the lowest-address free block of its (stream, size), in
                                the pool's tree; else in that head's `same` */
    TNode *same;             /* head only: the other free blocks of its (stream, size) */
} Block;

struct Segment {
    TNode node;          /* membership of a->segs, key (0, 0, base) */
    uint64_t base;       /* device address */
    uint64_t size;       /* bytes (for expandable: address space reserved, not counted) */
    uint64_t page;       /* expandable page size, bytes; 0 otherwise */
    Block *head;         /* lowest-address block */
    int stream;          /* stream of every block in it */
    bool small;          /* small pool */
    bool expandable;     /* an ExpandableSegment */
    bool injected;       /* rebuilt by alloc_inject */
};

typedef struct Pool {
    TNode *free;         /* FREE blocks keyed (stream, size, addr) */
    TNode *unmapped;     /* UNMAPPED blocks keyed (stream, 0, addr) */
    uint64_t gc_calls;   /* get_free_block calls while garbage collection is on */
    bool small;
} Pool;

typedef struct Event {
    Block *b;            /* block waiting on it */
    int stream;          /* stream it was recorded on */
    bool done;           /* completed (alloc_sync / alloc_stream_sync) */
} Event;

typedef struct Stat {
    uint64_t cur, peak;  /* bytes or count */
} Stat;

typedef struct Slab {
    struct Slab *next;
    Block blocks[SLAB_BLOCKS];
} Slab;

struct Alloc {
    AllocConfig cfg;
    Pool pools[2];               /* [0] small, [1] large */
    TNode *segs;                 /* segments by base */
    U64Map live;                 /* addr -> Block * (as uintptr_t) of ALLOCATED, PENDING blocks */
    Event *ev;                   /* FIFO of outstanding events */
    size_t nev, capev;
    Block *deferred;             /* deferred list head */
    Block *spare;                /* recycled Block structs (linked by next) */
    size_t nspare;
    Slab *slabs;                 /* every Block struct ever made */
    Segment *spare_seg;          /* one recycled Segment struct, or NULL */
    Stat allocated, reserved, active, requested, inactive_split, segments;
    uint64_t num_segment_allocs, num_segment_frees, num_segment_unmaps;
    uint64_t num_alloc_retries, num_ooms, injected_segments;
    uint64_t low_water;          /* lowest segment base placed so far */
    uint64_t ideal_next;         /* ideal allocator: next address */
    uint64_t inject_cursor;      /* address of the last injected block */
    uint32_t rng;                /* treap priorities (xorshift32, deterministic) */
    AllocListener listener;
    void *listener_ud;
    AllocOomInfo oom;
};

/* ---- host memory ---- */

/* Allocates with cfg's hook (also before an Alloc exists). */
static void *cfg_alloc(const AllocConfig *cfg, void *p, size_t osize, size_t nsize)
{
    if (cfg->host_alloc)
        return cfg->host_alloc(cfg->host_ud, p, osize, nsize);
    if (nsize == 0) {
        free(p);
        return NULL;
    }
    return realloc(p, nsize);
}

static void *host_alloc(Alloc *a, void *p, size_t osize, size_t nsize)
{
    return cfg_alloc(&a->cfg, p, osize, nsize);
}

static uint32_t next_prio(Alloc *a)
{
    uint32_t x = a->rng;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    a->rng = x;
    return x;
}

/* Makes sure at least n spare Block structs exist. VR_ENOMEM leaves the model unchanged. */
static VrStatus ensure_spare(Alloc *a, size_t n)
{
    while (a->nspare < n) {
        Slab *s = host_alloc(a, NULL, 0, sizeof *s);
        if (!s)
            return VR_ENOMEM;
        memset(s, 0, sizeof *s);
        s->next = a->slabs;
        a->slabs = s;
        for (size_t i = 0; i < SLAB_BLOCKS; i++) {
            s->blocks[i].next = a->spare;
            a->spare = &s->blocks[i];
        }
        a->nspare += SLAB_BLOCKS;
    }
    return VR_OK;
}

/* Takes a spare Block (ensure_spare must have made one), zeroed but for its uses array. */
static Block *block_new(Alloc *a)
{
    Block *b = a->spare;
    a->spare = b->next;
    a->nspare--;
    int *uses = b->uses;
    uint32_t cap = b->capuses;
    memset(b, 0, sizeof *b);
    b->uses = uses;
    b->capuses = cap;
    b->mapped = 1;
    return b;
}

static void block_recycle(Alloc *a, Block *b)
{
    b->next = a->spare;
    a->spare = b;
    a->nspare++;
}

static VrStatus ensure_spare_seg(Alloc *a)
{
    if (a->spare_seg)
        return VR_OK;
    a->spare_seg = host_alloc(a, NULL, 0, sizeof(Segment));
    return a->spare_seg ? VR_OK : VR_ENOMEM;
}

/* ---- live map (u64map.h): addr -> Block ---- */

static Block *live_get(const Alloc *a, uint64_t addr)
{
    uint64_t v;
    return u64map_get(&a->live, addr, &v) ? (Block *)(uintptr_t)v : NULL;
}

/* Makes room for one more live block (before a step that must not fail half-done). */
static VrStatus live_reserve(Alloc *a)
{
    return u64map_reserve(&a->live, 1);
}

/* Records b at addr (nonzero); cannot fail once live_reserve has made room. */
static void live_put(Alloc *a, uint64_t addr, Block *b)
{
    (void)u64map_put(&a->live, addr, (uint64_t)(uintptr_t)b);
}

static void live_del(Alloc *a, uint64_t addr)
{
    (void)u64map_del(&a->live, addr);
}

/* ---- statistics ---- */

static inline void stat_add(Stat *s, uint64_t n)
{
    s->cur += n;
    if (s->cur > s->peak)
        s->peak = s->cur;
}

static inline void stat_sub(Stat *s, uint64_t n)
{
    s->cur -= n;
}

static inline void stat_delta(Stat *s, int64_t d)
{
    if (d > 0)
        stat_add(s, (uint64_t)d);
    else if (d < 0)
        stat_sub(s, (uint64_t)-d);
}

static void emit(Alloc *a, AllocEventKind k, uint64_t addr, uint64_t size, int stream)
{
    if (a->listener)
        a->listener(a->listener_ud, k, addr, size, stream);
}

/* ---- pool sets ---- */

static inline Pool *pool_of(Alloc *a, const Block *b)
{
    return &a->pools[b->seg->small ? 0 : 1];
}

/* ---- a pool's free set: FREE blocks in PyTorch's order, (stream, size, addr) ----
 *
 * Two levels. The lowest-address free block of each (stream, size), its head, is in the pool's
 * treap `free`; the others of that size are in the head's own treap `same`. A pool holds some
 * hundreds of free blocks in a few dozen sizes, so the tree of heads is small, and best fit (the
 * lowest (size, addr) with size >= the request) is a head: one short descent. The order, and
 * therefore every answer, is that of one treap over all blocks; only the search is shorter
 * (replay of the largest trace: 9.9 -> 11.9 million events/s paired on one machine, 2026-12-01,
 * tests/bench.sh). Heads have distinct (stream, size), so a head is found by descending on that
 * pair alone. */

/* The link (root or child pointer) that holds the head of (k0, k1), or the NULL link where it
 * would be. */
static TNode **head_link(TNode **p, uint64_t k0, uint64_t k1)
{
    while (*p) {
        TNode *t = *p;
        if (t->k0 == k0 && t->k1 == k1)
            return p;
        p = (k0 != t->k0 ? k0 < t->k0 : k1 < t->k1) ? &t->l : &t->r;
    }
    return p;
}

/* The link that holds the first head whose (stream, size) >= (k0, k1), or NULL: with no address
 * bound, the first free block >= (k0, k1, 0) in one descent. */
static TNode **head_lower_link(TNode **p, uint64_t k0, uint64_t k1)
{
    TNode **best = NULL;
    while (*p) {
        TNode *t = *p;
        if (t->k0 != k0 ? t->k0 < k0 : t->k1 < k1) {
            p = &t->r;
        } else {
            best = p;
            p = &t->l;
        }
    }
    return best;
}

static void fs_insert(Pool *p, Block *b)
{
    TNode **hl = head_link(&p->free, b->node.k0, b->node.k1);
    Block *h = (Block *)*hl;
    if (!h) {
        b->head = 1;
        b->same = NULL;
        t_insert(&p->free, &b->node);
    } else if (b->addr > h->addr) {
        b->head = 0;
        t_insert(&h->same, &b->node);
    } else { /* b is the new head: it takes h's place, h joins the others */
        b->node.l = h->node.l;
        b->node.r = h->node.r;
        b->node.prio = h->node.prio;
        *hl = &b->node;
        b->head = 1;
        b->same = h->same;
        h->head = 0;
        h->same = NULL;
        t_insert(&b->same, &h->node);
    }
}

/* Takes head b out through hl, the link that holds it. */
static void fs_erase_head(TNode **hl, Block *b)
{
    if (!b->same) {
        *hl = t_merge(b->node.l, b->node.r);
    } else { /* the lowest of the others becomes the head, in b's place */
        TNode **ml = &b->same;
        while ((*ml)->l)
            ml = &(*ml)->l;
        TNode *m = *ml;
        *ml = m->r;
        Block *mb = (Block *)m;
        mb->head = 1;
        mb->same = b->same;
        m->l = b->node.l;
        m->r = b->node.r;
        m->prio = b->node.prio;
        *hl = m;
    }
    b->head = 0;
    b->same = NULL;
}

static void fs_erase(Pool *p, Block *b)
{
    TNode **hl = head_link(&p->free, b->node.k0, b->node.k1);
    if (b->head)
        fs_erase_head(hl, b);
    else
        t_erase(&((Block *)*hl)->same, &b->node);
}

/* First free block with key >= (q0, q1, q2), or NULL. */
static TNode *fs_lower(const Pool *p, uint64_t q0, uint64_t q1, uint64_t q2)
{
    if (q2 == 0) {
        TNode **hl = head_lower_link((TNode **)&p->free, q0, q1);
        return hl ? *hl : NULL;
    }
    TNode *h = *head_link((TNode **)&p->free, q0, q1);
    if (!h)
        return t_lower(p->free, q0, q1, 0); /* the first head of a larger (stream, size) */
    if (h->k2 >= q2)
        return h;
    TNode *m = t_lower(((Block *)h)->same, q0, q1, q2);
    return m ? m : t_lower(p->free, q0, q1, h->k2 + 1);
}

/* Last free block with key < (q0, q1, q2), or NULL. */
static TNode *fs_below(const Pool *p, uint64_t q0, uint64_t q1, uint64_t q2)
{
    TNode *h = *head_link((TNode **)&p->free, q0, q1);
    if (h && h->k2 < q2) {
        TNode *m = t_below(((Block *)h)->same, q0, q1, q2);
        return m ? m : h;
    }
    TNode *ph = t_below(p->free, q0, q1, 0); /* the head of the previous (stream, size) */
    if (!ph)
        return NULL;
    TNode *l = t_last(((Block *)ph)->same);
    return l ? l : ph;
}

static TNode *fs_first(const Pool *p)
{
    return t_first(p->free);
}

/* The free block after n (n in the set, or any key: then the first block above it). */
static TNode *fs_next(const Pool *p, const TNode *n)
{
    const Block *b = (const Block *)n;
    if (b->where == IN_FREE && b->head) { /* the lowest of its others, else the next head */
        TNode *m = t_first(b->same);
        return m ? m : t_lower(p->free, n->k0, n->k1, n->k2 + 1);
    }
    return fs_lower(p, n->k0, n->k1, n->k2 + 1);
}

static TNode *fs_prev(const Pool *p, const TNode *n)
{
    return fs_below(p, n->k0, n->k1, n->k2);
}

static void free_insert(Alloc *a, Block *b)
{
    Pool *p = pool_of(a, b);
    b->node.k0 = (uint64_t)b->stream;
    b->node.k1 = b->size;
    b->node.k2 = b->addr;
    b->node.prio = next_prio(a);
    b->gc_base = p->gc_calls;
    b->where = IN_FREE;
    fs_insert(p, b);
}

static void unmapped_insert(Alloc *a, Block *b)
{
    Pool *p = pool_of(a, b);
    b->node.k0 = (uint64_t)b->stream;
    b->node.k1 = 0;
    b->node.k2 = b->addr;
    b->node.prio = next_prio(a);
    b->where = IN_UNMAPPED;
    t_insert(&p->unmapped, &b->node);
}

static void set_erase(Alloc *a, Block *b)
{
    Pool *p = pool_of(a, b);
    if (b->where == IN_FREE)
        fs_erase(p, b);
    else if (b->where == IN_UNMAPPED)
        t_erase(&p->unmapped, &b->node);
    b->where = IN_NONE;
}

static inline bool is_split(const Block *b)
{
    return b->prev || b->next;
}

/* ---- configuration (sections 1, 9) ---- */

void alloc_config_default(AllocConfig *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->kind = ALLOC_CACHING;
    cfg->max_split_size = UINT64_MAX;
    cfg->max_non_split_rounding = K_LARGE_BUFFER;
}

static bool is_pow2(uint64_t x)
{
    return x && !(x & (x - 1));
}

static int floor_log2(uint64_t x)
{
    return 63 - __builtin_clzll(x);
}

uint64_t alloc_round_size(const AllocConfig *cfg, uint64_t size)
{
    if (size < K_MIN_BLOCK)
        return K_MIN_BLOCK;
    if (size > ALLOC_MAX_REQUEST)
        size = ALLOC_MAX_REQUEST; /* callers reject larger requests; keeps the sums exact */
    int idx = floor_log2(size) - 20;
    idx = idx < 0 ? 0 : idx > 15 ? 15 : idx;
    uint64_t d = cfg->kind == ALLOC_CACHING ? cfg->roundup_power2_divisions[idx] : 0;
    if (d > 1 && size > K_MIN_BLOCK * d) {
        if (is_pow2(size))
            return size;
        uint64_t f = (uint64_t)1 << floor_log2(size);
        uint64_t step = f >> floor_log2(d);
        if (step == 0)
            return f << 1;
        uint64_t fl = size & ~(step - 1);
        return fl == size ? size : fl + step;
    }
    return (size + K_MIN_BLOCK - 1) / K_MIN_BLOCK * K_MIN_BLOCK;
}

static uint64_t allocation_size(uint64_t size)
{
    if (size <= K_SMALL_SIZE)
        return K_SMALL_BUFFER;
    if (size < K_MIN_LARGE_ALLOC)
        return K_LARGE_BUFFER;
    return (size + K_ROUND_LARGE - 1) / K_ROUND_LARGE * K_ROUND_LARGE;
}

static void trim(const char **s, const char **e)
{
    while (*s < *e && (**s == ' ' || **s == '\t'))
        (*s)++;
    while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t'))
        (*e)--;
}

static bool tok_eq(const char *s, const char *e, const char *lit)
{
    size_t n = strlen(lit);
    return (size_t)(e - s) == n && memcmp(s, lit, n) == 0;
}

/* Parses an unsigned decimal integer filling all of [s, e). */
static bool parse_u64(const char *s, const char *e, uint64_t *out)
{
    if (s >= e)
        return false;
    uint64_t v = 0;
    for (; s < e; s++) {
        if (*s < '0' || *s > '9')
            return false;
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return true;
}

static bool parse_double(const char *s, const char *e, double *out)
{
    char buf[64];
    size_t n = (size_t)(e - s);
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *end;
    double v = strtod(buf, &end);
    if (*end != 0 || v != v)
        return false;
    *out = v;
    return true;
}

static VrStatus conf_err(char *err, size_t errlen, const char *fmt, const char *s, const char *e)
{
    if (err && errlen)
        snprintf(err, errlen, fmt, (int)(e - s), s);
    return VR_EINVAL;
}

/* roundup_power2_divisions value: one int, or [MB:div,...,>:div]. */
static VrStatus parse_divisions(AllocConfig *cfg, const char *s, const char *e, char *err,
                                size_t errlen)
{
    unsigned div[16];
    memcpy(div, cfg->roundup_power2_divisions, sizeof div);
    if (s < e && *s == '[') {
        if (e[-1] != ']')
            return conf_err(err, errlen, "roundup_power2_divisions: missing ']' in '%.*s'", s, e);
        const char *p = s + 1, *end = e - 1;
        bool first = true;
        size_t last_index = 0;
        while (p < end) {
            const char *q = memchr(p, ',', (size_t)(end - p));
            if (!q)
                q = end;
            const char *colon = memchr(p, ':', (size_t)(q - p));
            if (!colon)
                return conf_err(err, errlen,
                                "roundup_power2_divisions: expected INTERVAL_MB:DIVISIONS, got "
                                "'%.*s'", p, q);
            const char *k0 = p, *k1 = colon, *v0 = colon + 1, *v1 = q;
            trim(&k0, &k1);
            trim(&v0, &v1);
            uint64_t val;
            if (!parse_u64(v0, v1, &val) || val > ((uint64_t)1 << 31) || (val != 0 && !is_pow2(val)))
                return conf_err(err, errlen,
                                "roundup_power2_divisions: divisions must be 0 or a power of two, "
                                "got '%.*s'", v0, v1);
            if (tok_eq(k0, k1, ">")) {
                for (size_t i = last_index; i < 16; i++)
                    div[i] = (unsigned)val;
            } else {
                uint64_t mb;
                if (!parse_u64(k0, k1, &mb) || !is_pow2(mb))
                    return conf_err(err, errlen,
                                    "roundup_power2_divisions: interval must be a power of two "
                                    "in MB, got '%.*s'", k0, k1);
                size_t idx = (size_t)floor_log2(mb);
                if (idx > 15)
                    idx = 15;
                if (first) {
                    for (size_t i = 0; i < idx; i++)
                        div[i] = (unsigned)val;
                    first = false;
                }
                div[idx] = (unsigned)val;
                last_index = idx;
            }
            p = q < end ? q + 1 : end;
        }
    } else {
        uint64_t val;
        if (!parse_u64(s, e, &val) || val > ((uint64_t)1 << 31) || (val != 0 && !is_pow2(val)))
            return conf_err(err, errlen,
                            "roundup_power2_divisions must be 0, a power of two, or "
                            "[MB:N,...,>:N], got '%.*s'", s, e);
        for (size_t i = 0; i < 16; i++)
            div[i] = (unsigned)val;
    }
    memcpy(cfg->roundup_power2_divisions, div, sizeof div);
    return VR_OK;
}

static VrStatus parse_bool(const char *s, const char *e, bool *out, const char *key, char *err,
                           size_t errlen)
{
    if (tok_eq(s, e, "True")) {
        *out = true;
        return VR_OK;
    }
    if (tok_eq(s, e, "False")) {
        *out = false;
        return VR_OK;
    }
    if (err && errlen)
        snprintf(err, errlen, "%s must be True or False (PyTorch's spelling), got '%.*s'", key,
                 (int)(e - s), s);
    return VR_EINVAL;
}

VrStatus alloc_config_parse(AllocConfig *cfg, const char *conf, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (!conf)
        return VR_OK;
    AllocConfig c = *cfg;
    const char *p = conf, *end = conf + strlen(conf);
    while (p < end) {
        /* an item ends at a comma outside brackets */
        const char *q = p;
        int depth = 0;
        while (q < end && (depth > 0 || *q != ',')) {
            if (*q == '[')
                depth++;
            else if (*q == ']')
                depth--;
            q++;
        }
        const char *ks = p, *ke = memchr(p, ':', (size_t)(q - p));
        if (!ke) {
            const char *s = p, *e = q;
            trim(&s, &e);
            if (s == e) { /* empty item, e.g. a trailing comma */
                p = q < end ? q + 1 : end;
                continue;
            }
            return conf_err(err, errlen, "expected key:value in PYTORCH_CUDA_ALLOC_CONF, got '%.*s'",
                            s, e);
        }
        const char *vs = ke + 1, *ve = q;
        trim(&ks, &ke);
        trim(&vs, &ve);
        VrStatus st = VR_OK;
        if (tok_eq(ks, ke, "max_split_size_mb")) {
            uint64_t mb;
            if (!parse_u64(vs, ve, &mb) || mb <= 20)
                return conf_err(err, errlen, "max_split_size_mb must be an integer > 20, got '%.*s'",
                                vs, ve);
            /* c10 AllocatorConfig::parseMaxSplitSize: val = min(val, SIZE_MAX / MiB); the size is
             * val * MiB, so a huge value still counts as set (it is not SIZE_MAX) */
            if (mb > (UINT64_MAX >> 20))
                mb = UINT64_MAX >> 20;
            c.max_split_size = mb << 20;
        } else if (tok_eq(ks, ke, "max_non_split_rounding_mb")) {
            uint64_t mb;
            if (!parse_u64(vs, ve, &mb) || mb <= 20 || mb > ((uint64_t)1 << 30))
                return conf_err(err, errlen,
                                "max_non_split_rounding_mb must be an integer > 20, got '%.*s'", vs,
                                ve);
            c.max_non_split_rounding = mb << 20;
        } else if (tok_eq(ks, ke, "roundup_power2_divisions")) {
            st = parse_divisions(&c, vs, ve, err, errlen);
        } else if (tok_eq(ks, ke, "garbage_collection_threshold")) {
            double t;
            if (!parse_double(vs, ve, &t) || !(t > 0.0 && t < 1.0))
                return conf_err(err, errlen,
                                "garbage_collection_threshold must be in (0, 1), got '%.*s'", vs,
                                ve);
            c.gc_threshold = t;
        } else if (tok_eq(ks, ke, "expandable_segments")) {
            st = parse_bool(vs, ve, &c.expandable_segments, "expandable_segments", err, errlen);
        } else if (tok_eq(ks, ke, "backend")) {
            if (tok_eq(vs, ve, "cudaMallocAsync")) {
                if (err && errlen)
                    snprintf(err, errlen, "backend:cudaMallocAsync is not modelled (only native)");
                return VR_ENOTSUP;
            }
            if (!tok_eq(vs, ve, "native"))
                return conf_err(err, errlen, "backend must be native or cudaMallocAsync, got '%.*s'",
                                vs, ve);
        } else if (tok_eq(ks, ke, "release_lock_on_cudamalloc") ||
                   tok_eq(ks, ke, "graph_capture_record_stream_reuse")) {
            bool dummy; /* no effect on what is reserved */
            st = parse_bool(vs, ve, &dummy, "this option", err, errlen);
        } else if ((size_t)(ke - ks) > 7 && memcmp(ks, "pinned_", 7) == 0) {
            /* pinned host memory options: no effect on device memory */
        } else {
            return conf_err(err, errlen,
                            "unknown PYTORCH_CUDA_ALLOC_CONF key '%.*s' (known: max_split_size_mb, "
                            "max_non_split_rounding_mb, roundup_power2_divisions, "
                            "garbage_collection_threshold, expandable_segments, backend, "
                            "release_lock_on_cudamalloc, graph_capture_record_stream_reuse, pinned_*)", ks, ke);
        }
        if (st != VR_OK)
            return st;
        p = q < end ? q + 1 : end;
    }
    *cfg = c;
    return VR_OK;
}

void alloc_config_format(const AllocConfig *cfg, char *buf, size_t len)
{
    size_t n = 0;
    if (!buf || !len)
        return;
    buf[0] = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        if (n < len) {                                                                             \
            int w = snprintf(buf + n, len - n, "%s", n ? "," : "");                                \
            if (w > 0)                                                                             \
                n += (size_t)w;                                                                    \
        }                                                                                          \
        if (n < len) {                                                                             \
            int w = snprintf(buf + n, len - n, __VA_ARGS__);                                       \
            if (w > 0)                                                                             \
                n += (size_t)w;                                                                    \
        }                                                                                          \
    } while (0)
    if (cfg->max_split_size != UINT64_MAX)
        PUT("max_split_size_mb:%" PRIu64, cfg->max_split_size >> 20);
    if (cfg->max_non_split_rounding != K_LARGE_BUFFER)
        PUT("max_non_split_rounding_mb:%" PRIu64, cfg->max_non_split_rounding >> 20);
    bool any = false, same = true;
    for (int i = 0; i < 16; i++) {
        any |= cfg->roundup_power2_divisions[i] != 0;
        same &= cfg->roundup_power2_divisions[i] == cfg->roundup_power2_divisions[0];
    }
    if (any && same) {
        PUT("roundup_power2_divisions:%u", cfg->roundup_power2_divisions[0]);
    } else if (any) {
        char tmp[256];
        size_t m = 0;
        for (int i = 0; i < 16 && m < sizeof tmp; i++) {
            int w = snprintf(tmp + m, sizeof tmp - m, "%s%llu:%u", i ? "," : "",
                             1ULL << i, cfg->roundup_power2_divisions[i]);
            if (w > 0)
                m += (size_t)w;
        }
        PUT("roundup_power2_divisions:[%s]", tmp);
    }
    if (cfg->gc_threshold > 0)
        PUT("garbage_collection_threshold:%g", cfg->gc_threshold);
    if (cfg->expandable_segments)
        PUT("expandable_segments:True");
#undef PUT
}

/* ---- creation ---- */

VrStatus alloc_new(const AllocConfig *cfg, Alloc **out)
{
    *out = NULL;
    if (cfg->kind != ALLOC_CACHING && cfg->kind != ALLOC_IDEAL)
        return VR_EINVAL;
    if (cfg->max_split_size <= K_LARGE_BUFFER)
        return VR_EINVAL;
    if (cfg->gc_threshold < 0 || cfg->gc_threshold >= 1)
        return VR_EINVAL;
    Alloc *a = cfg_alloc(cfg, NULL, 0, sizeof *a);
    if (!a)
        return VR_ENOMEM;
    memset(a, 0, sizeof *a);
    a->cfg = *cfg;
    a->pools[0].small = true;
    a->rng = 0x9E3779B9u;
    a->low_water = SIM_TOP;
    a->ideal_next = (uint64_t)1 << 40;
    u64map_init(&a->live, cfg->host_alloc, cfg->host_ud);
    if (live_reserve(a) != VR_OK) {
        alloc_free(a);
        return VR_ENOMEM;
    }
    *out = a;
    return VR_OK;
}

/* Frees every segment in the subtree (post-order, iterative via flattening). */
static void free_segments(Alloc *a)
{
    TNode *t = a->segs;
    while (t) {
        if (t->l) { /* rotate right to flatten */
            TNode *l = t->l;
            t->l = l->r;
            l->r = t;
            t = l;
        } else {
            TNode *r = t->r;
            host_alloc(a, t, sizeof(Segment), 0);
            t = r;
        }
    }
    a->segs = NULL;
}

void alloc_free(Alloc *a)
{
    if (!a)
        return;
    free_segments(a);
    for (Slab *s = a->slabs; s;) {
        Slab *n = s->next;
        for (size_t i = 0; i < SLAB_BLOCKS; i++)
            if (s->blocks[i].uses)
                host_alloc(a, s->blocks[i].uses, s->blocks[i].capuses * sizeof(int), 0);
        host_alloc(a, s, sizeof *s, 0);
        s = n;
    }
    if (a->spare_seg)
        host_alloc(a, a->spare_seg, sizeof(Segment), 0);
    if (a->ev)
        host_alloc(a, a->ev, a->capev * sizeof *a->ev, 0);
    u64map_free(&a->live);
    AllocConfig cfg = a->cfg;
    cfg_alloc(&cfg, a, sizeof *a, 0);
}

void alloc_set_listener(Alloc *a, AllocListener fn, void *ud)
{
    a->listener = fn;
    a->listener_ud = ud;
}

const AllocConfig *alloc_config(const Alloc *a)
{
    return &a->cfg;
}

/* ---- segments and placement (11.2, 11.3) ---- */

/* The segment containing addr, or NULL. */
static Segment *seg_containing(const Alloc *a, uint64_t addr)
{
    TNode *n = t_below(a->segs, 0, 0, addr + 1);
    if (!n)
        return NULL;
    Segment *s = (Segment *)n;
    return addr - s->base < s->size ? s : NULL;
}

/* Whether [base, base + size) overlaps a segment. */
static bool seg_overlaps(const Alloc *a, uint64_t base, uint64_t size)
{
    TNode *n = t_below(a->segs, 0, 0, base + size);
    if (!n)
        return false;
    Segment *s = (Segment *)n;
    return s->base + s->size > base;
}

/* A base address for a new segment of `size` bytes: the hint if usable, else below all; 0 when
 * the simulated address space has no room left (only after petabytes of segments). */
static uint64_t place_segment(Alloc *a, uint64_t size, uint64_t hint)
{
    if (hint && hint % K_MIN_BLOCK == 0 && hint < ADDR_LIMIT && size < ADDR_LIMIT - hint &&
        !seg_overlaps(a, hint, size))
        return hint;
    uint64_t align = size > K_SMALL_BUFFER ? 32 * VR_MIB : K_SMALL_BUFFER;
    uint64_t low = a->low_water; /* below every segment placed, and every rebuilt one */
    TNode *first = t_first(a->segs);
    if (first && ((Segment *)first)->base < low)
        low = ((Segment *)first)->base;
    if (low > SIM_FLOOR + size + align)
        return (low - size) & ~(align - 1);
    /* out of room below: above the highest segment */
    TNode *n = t_last(a->segs);
    uint64_t top = n ? ((Segment *)n)->base + ((Segment *)n)->size : SIM_TOP;
    if (top < SIM_TOP)
        top = SIM_TOP;
    top = (top + align - 1) & ~(align - 1);
    if (top >= ADDR_LIMIT || size >= ADDR_LIMIT - top)
        return 0; /* the simulated address space is full: the device says no */
    return top;
}

/* Makes a segment from the spare struct (ensure_spare_seg first) and links it. */
static Segment *seg_new(Alloc *a, uint64_t base, uint64_t size, int stream, bool small,
                        bool expandable)
{
    Segment *s = a->spare_seg;
    a->spare_seg = NULL;
    memset(s, 0, sizeof *s);
    s->base = base;
    s->size = size;
    s->stream = stream;
    s->small = small;
    s->expandable = expandable;
    s->page = expandable ? (small ? K_SMALL_BUFFER : K_LARGE_BUFFER) : 0;
    s->node.k2 = base;
    s->node.prio = next_prio(a);
    t_insert(&a->segs, &s->node);
    if (base < a->low_water)
        a->low_water = base;
    return s;
}

/* The first block of new segment s, spanning all of it (from a spare Block: ensure_spare). */
static Block *seg_whole_block(Alloc *a, Segment *s)
{
    Block *b = block_new(a);
    b->addr = s->base;
    b->size = s->size;
    b->seg = s;
    b->stream = s->stream;
    s->head = b;
    return b;
}

static void seg_delete(Alloc *a, Segment *s)
{
    t_erase(&a->segs, &s->node);
    if (!a->spare_seg)
        a->spare_seg = s;
    else
        host_alloc(a, s, sizeof *s, 0);
}

/* ---- merging and freeing (section 4) ---- */

/* try_merge_blocks: merges src into dst when src is FREE (or UNMAPPED) in the same mapped state.
 * Returns the bytes taken over. */
static uint64_t try_merge(Alloc *a, Block *dst, Block *src)
{
    if (!src || src->allocated || src->event_count > 0 || src->nuses > 0 ||
        dst->mapped != src->mapped)
        return 0;
    set_erase(a, src);
    if (dst->prev == src) {
        dst->addr = src->addr;
        dst->prev = src->prev;
        if (dst->prev)
            dst->prev->next = dst;
        else
            dst->seg->head = dst;
    } else {
        dst->next = src->next;
        if (dst->next)
            dst->next->prev = dst;
    }
    uint64_t sz = src->size;
    dst->size += sz;
    block_recycle(a, src);
    return sz;
}

/* free_block: b (not allocated, no events) becomes FREE, merging with its neighbours. */
static void free_block(Alloc *a, Block *b)
{
    uint64_t orig = b->size, req = b->requested;
    int64_t net = 0;
    live_del(a, b->addr);
    Block *cands[2] = {b->prev, b->next};
    for (int i = 0; i < 2; i++) {
        uint64_t sub = try_merge(a, b, cands[i]);
        if (sub > 0)
            net -= (int64_t)sub;
    }
    free_insert(a, b);
    if (is_split(b))
        net += (int64_t)b->size;
    if (!b->seg->expandable)
        stat_delta(&a->inactive_split, net);
    stat_sub(&a->active, orig);
    stat_sub(&a->requested, req);
    b->requested = 0;
}

static void deferred_unlink(Alloc *a, Block *b)
{
    if (b->dprev)
        b->dprev->dnext = b->dnext;
    else
        a->deferred = b->dnext;
    if (b->dnext)
        b->dnext->dprev = b->dprev;
    b->dprev = b->dnext = NULL;
    b->deferred = 0;
}

/* process_events (7.3): frees blocks whose events have all completed. Within a stream completed
 * events always form a prefix (a stream sync completes everything recorded so far), so this is
 * PyTorch's "up to the first unfinished one". */
static void process_events(Alloc *a)
{
    size_t w = 0;
    for (size_t i = 0; i < a->nev; i++) {
        Event e = a->ev[i];
        if (!e.done) {
            a->ev[w++] = e;
            continue;
        }
        if (--e.b->event_count == 0)
            free_block(a, e.b);
    }
    a->nev = w;
}

/* synchronize_and_free_events: waits for every event (and deferred free). */
static void sync_and_free_events(Alloc *a)
{
    for (size_t i = 0; i < a->nev; i++) {
        Block *b = a->ev[i].b;
        if (--b->event_count == 0)
            free_block(a, b);
    }
    a->nev = 0;
    while (a->deferred) {
        Block *b = a->deferred;
        deferred_unlink(a, b);
        if (--b->event_count == 0)
            free_block(a, b);
    }
}

/* ---- releasing memory (5.3, 5.5, 5.6, 6.5) ---- */

/* release_block: cudaFree of a FREE block that is a whole non-expandable segment. */
static void release_block(Alloc *a, Block *b)
{
    Segment *s = b->seg;
    set_erase(a, b);
    stat_sub(&a->reserved, b->size);
    stat_sub(&a->segments, 1);
    a->num_segment_frees++;
    emit(a, ALLOC_EV_SEGMENT_FREE, b->addr, b->size, b->stream);
    block_recycle(a, b);
    seg_delete(a, s);
}

/* Narrows block b (already out of the free set) to [addr, addr + size), giving the parts of
 * it before and after their own FREE blocks in the same segment. Needs 2 spare blocks. */
static void split_off_ends(Alloc *a, Block *b, uint64_t addr, uint64_t size)
{
    Segment *s = b->seg;
    uint64_t before = addr - b->addr, after = b->addr + b->size - addr - size;
    if (before > 0) {
        Block *nb = block_new(a);
        nb->addr = b->addr;
        nb->size = before;
        nb->seg = s;
        nb->stream = b->stream;
        nb->prev = b->prev;
        nb->next = b;
        if (nb->prev)
            nb->prev->next = nb;
        else
            s->head = nb;
        b->prev = nb;
        free_insert(a, nb);
    }
    if (after > 0) {
        Block *na = block_new(a);
        na->addr = addr + size;
        na->size = after;
        na->seg = s;
        na->stream = b->stream;
        na->prev = b;
        na->next = b->next;
        if (na->next)
            na->next->prev = na;
        b->next = na;
        free_insert(a, na);
    }
    b->addr = addr;
    b->size = size;
}

/* unmap_block: unmaps the whole pages lying inside FREE expandable block b. Needs 2 spare
 * blocks. Releases the segment when nothing of it stays mapped. */
static void unmap_block(Alloc *a, Block *b)
{
    Segment *s = b->seg;
    uint64_t page = s->page, off = b->addr - s->base;
    uint64_t begin = (off + page - 1) / page, end = (off + b->size) / page;
    if (begin >= end)
        return;
    uint64_t uaddr = s->base + begin * page, usize = (end - begin) * page;
    set_erase(a, b);
    split_off_ends(a, b, uaddr, usize);
    b->mapped = 0;
    try_merge(a, b, b->prev);
    try_merge(a, b, b->next);
    unmapped_insert(a, b);
    stat_sub(&a->reserved, usize);
    a->num_segment_frees++;
    a->num_segment_unmaps++;
    emit(a, ALLOC_EV_SEGMENT_UNMAP, uaddr, usize, b->stream);
    if (!b->prev && !b->next) { /* release_expandable_segment */
        set_erase(a, b);
        block_recycle(a, b);
        seg_delete(a, s);
    }
}

/* release_blocks: every FREE whole segment of the pool goes back; expandable free blocks have
 * their whole pages unmapped. VR_ENOMEM if spare blocks for an unmap could not be made (what was
 * done stays done and consistent). */
static VrStatus release_blocks(Alloc *a, Pool *p)
{
    TNode *n = fs_first(p);
    while (n) {
        Block *b = (Block *)n;
        TNode *nx = fs_next(p, n);
        if (b->seg->expandable) {
            if (ensure_spare(a, 2) != VR_OK)
                return VR_ENOMEM;
            unmap_block(a, b);
        } else if (!b->prev && !b->next) {
            release_block(a, b);
        }
        n = nx;
    }
    return VR_OK;
}

/* release_cached_blocks: wait on all events, then release both pools. */
static VrStatus release_cached_blocks(Alloc *a)
{
    sync_and_free_events(a);
    VrStatus st = release_blocks(a, &a->pools[1]);
    if (st == VR_OK)
        st = release_blocks(a, &a->pools[0]);
    return st;
}

/* release_available_cached_blocks (5.5): with max_split_size set, frees the smallest
 * same-stream free block >= max(request, M), or oversize blocks from the largest down. */
static bool release_available(Alloc *a, Pool *p, int stream, uint64_t rsize)
{
    uint64_t M = a->cfg.max_split_size;
    if (M == UINT64_MAX)
        return false;
    uint64_t key = rsize < M ? M : rsize;
    TNode *n = fs_lower(p, (uint64_t)stream, key, 0);
    if (!n || n->k0 != (uint64_t)stream || ((Block *)n)->seg->expandable) {
        TNode *m = fs_below(p, (uint64_t)stream, key, 0);
        if (!m)
            return false;
        uint64_t released = 0;
        while (m && released < key && ((Block *)m)->size >= M && m->k0 == (uint64_t)stream) {
            Block *cur = (Block *)m;
            m = fs_prev(p, m);
            if (!cur->seg->expandable && !cur->prev && !cur->next) {
                released += cur->size;
                release_block(a, cur);
            }
        }
        return released >= key;
    }
    Block *b = (Block *)n;
    if (b->prev || b->next)
        return false; /* not a whole segment: PyTorch never gets here (see header) */
    release_block(a, b);
    return true;
}

/* garbage_collect_cached_blocks (5.3). */
static void garbage_collect(Alloc *a)
{
    Pool *p = &a->pools[1];
    uint64_t threshold = (uint64_t)(a->cfg.gc_threshold * (double)a->cfg.capacity);
    if (a->reserved.cur <= threshold)
        return;
    uint64_t target = a->reserved.cur - threshold, reclaimed = 0, total_age = 0;
    uint64_t count = 0;
    for (TNode *n = fs_first(p); n; n = fs_next(p, n)) {
        Block *b = (Block *)n;
        if (!is_split(b)) {
            total_age += p->gc_calls - b->gc_base;
            count++;
        }
    }
    if (count == 0)
        return;
    bool freed = true;
    while (reclaimed < target && freed && count > 0) {
        double age_threshold = (double)total_age / (double)count;
        freed = false;
        TNode *n = fs_first(p);
        while (n) {
            Block *b = (Block *)n;
            n = fs_next(p, n);
            uint64_t age = p->gc_calls - b->gc_base;
            if (!is_split(b) && !b->seg->expandable && (double)age >= age_threshold) {
                freed = true;
                reclaimed += b->size;
                total_age -= age;
                count--;
                release_block(a, b);
            }
        }
    }
}

/* ---- finding and making blocks (sections 3, 5, 6) ---- */

static inline uint64_t expandable_size(const Block *b)
{
    return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
}

/* get_free_block: best fit (3.1) with the expandable rule (6.4) and the oversize rules (3.2).
 * Returns the block removed from the free set, or NULL. */
static Block *get_free_block(Alloc *a, Pool *p, int stream, uint64_t rsize)
{
    if (a->cfg.fraction_set && a->cfg.gc_threshold > 0)
        p->gc_calls++;
    TNode **hl = head_lower_link(&p->free, (uint64_t)stream, rsize);
    TNode *n = hl ? *hl : NULL;
    if (!n || n->k0 != (uint64_t)stream)
        return NULL;
    Block *b = (Block *)n;
    if (b->seg->expandable) {
        if (a->cfg.expandable_segments) {
            for (;;) {
                TNode *nx = fs_next(p, &b->node);
                if (!b->seg->expandable || !nx || nx->k0 != (uint64_t)stream ||
                    expandable_size((Block *)nx) >= expandable_size(b))
                    break;
                b = (Block *)nx;
            }
        } else {
            TNode *nx = &b->node;
            do {
                nx = fs_next(p, nx);
            } while (nx && ((Block *)nx)->seg->expandable && nx->k0 == (uint64_t)stream);
            if (!nx || nx->k0 != (uint64_t)stream)
                return NULL;
            b = (Block *)nx;
        }
    }
    uint64_t M = a->cfg.max_split_size;
    if (rsize < M && b->size >= M)
        return NULL;
    if (rsize >= M && b->size >= rsize + a->cfg.max_non_split_rounding)
        return NULL;
    if (&b->node == n) { /* the head the descent found: taken out through its link */
        fs_erase_head(hl, b);
        b->where = IN_NONE;
    } else {
        set_erase(a, b);
    }
    return b;
}

static inline bool allocatable(const Block *b)
{
    return b && !b->allocated && b->event_count == 0 && b->nuses == 0;
}

/* The expandable room check (11.4): unallocated blocks from b on cover size. */
static bool has_room(const Block *b, uint64_t size)
{
    uint64_t bytes = 0;
    while (bytes < size && allocatable(b)) {
        bytes += b->size;
        b = b->next;
    }
    return bytes >= size;
}

/* find_expandable_block (6.2): the lowest-address unmapped block on this stream (with the free
 * block before it) that has room, else a new expandable segment. NULL on host failure, or with
 * *no_room when the simulated address space is full. */
static Block *find_expandable(Alloc *a, Pool *p, int stream, uint64_t size, uint64_t hint,
                              bool *no_room)
{
    *no_room = false;
    for (TNode *n = t_lower(p->unmapped, (uint64_t)stream, 0, 0);
         n && n->k0 == (uint64_t)stream; n = t_next(p->unmapped, n)) {
        Block *c = (Block *)n;
        if (allocatable(c->prev))
            c = c->prev;
        if (has_room(c, size))
            return c;
    }
    if (ensure_spare_seg(a) != VR_OK || ensure_spare(a, 1) != VR_OK)
        return NULL;
    uint64_t page = p->small ? K_SMALL_BUFFER : K_LARGE_BUFFER;
    uint64_t va = a->cfg.capacity ? a->cfg.capacity / 8 * 9 : DEFAULT_VA;
    if (va < size) /* only with no capacity: PyTorch's address space is 9/8 of the device */
        va = size;
    va = (va + page - 1) / page * page;
    uint64_t base = place_segment(a, va, hint);
    if (!base) {
        *no_room = true;
        return NULL;
    }
    Segment *s = seg_new(a, base, va, stream, p->small, true);
    Block *b = seg_whole_block(a, s);
    b->mapped = 0;
    unmapped_insert(a, b);
    return b;
}

/* map_block: maps whole pages covering the first `size` bytes of UNMAPPED block b; the mapped
 * part becomes FREE and merges with free neighbours. Needs 1 spare block. False if the device
 * has no room (nothing changes). */
static bool map_block(Alloc *a, Block *b, uint64_t size)
{
    Segment *s = b->seg;
    uint64_t page = s->page;
    uint64_t msize = (size + page - 1) / page * page;
    if (msize > b->size)
        msize = b->size;
    if (a->cfg.capacity && a->reserved.cur + msize > a->cfg.capacity)
        return false;
    uint64_t maddr = b->addr;
    set_erase(a, b);
    b->mapped = 1;
    if (msize < b->size) {
        Block *r = block_new(a);
        r->addr = b->addr + msize;
        r->size = b->size - msize;
        r->seg = s;
        r->stream = b->stream;
        r->mapped = 0;
        r->prev = b;
        r->next = b->next;
        if (r->next)
            r->next->prev = r;
        b->next = r;
        b->size = msize;
        unmapped_insert(a, r);
    }
    try_merge(a, b, b->prev);
    try_merge(a, b, b->next);
    free_insert(a, b);
    stat_add(&a->reserved, msize);
    a->num_segment_allocs++;
    emit(a, ALLOC_EV_SEGMENT_MAP, maddr, msize, b->stream);
    return true;
}

/* try_allocate_expandable_block. *out = the block (removed from the free set) or NULL when the
 * device is out of room; VR_ENOMEM on host failure. */
static VrStatus try_expandable(Alloc *a, Pool *p, int stream, uint64_t rsize, uint64_t hint,
                               Block **out)
{
    *out = NULL;
    bool no_room;
    Block *c = find_expandable(a, p, stream, rsize, hint, &no_room);
    if (!c)
        return no_room ? VR_OK : VR_ENOMEM;
    if (!c->mapped) {
        if (ensure_spare(a, 2) != VR_OK)
            return VR_ENOMEM;
        if (!map_block(a, c, c->size < rsize ? c->size : rsize))
            return VR_OK;
    }
    while (c->size < rsize) {
        Block *nc = c->next;
        if (!nc || nc->mapped) /* has_room guarantees free -> unmapped -> ... */
            return VR_OK;
        uint64_t rem = rsize - c->size;
        if (ensure_spare(a, 2) != VR_OK)
            return VR_ENOMEM;
        if (!map_block(a, nc, rem < nc->size ? rem : nc->size))
            return VR_OK;
        c = nc;
    }
    set_erase(a, c);
    *out = c;
    return VR_OK;
}

typedef struct Params {
    Pool *pool;
    int stream;
    uint64_t rsize;      /* rounded request */
    uint64_t alloc_size; /* segment size for a new cudaMalloc */
    uint64_t hint;
} Params;

/* alloc_block (5.4): new memory for p. *out = block or NULL when the device says no. */
static VrStatus alloc_block(Alloc *a, const Params *p, bool retry, Block **out)
{
    *out = NULL;
    if (retry)
        a->num_alloc_retries++;
    uint64_t size = p->alloc_size;
    if (a->cfg.fraction_set && a->cfg.capacity && a->reserved.cur + size > a->cfg.capacity)
        return VR_OK;
    if (a->cfg.expandable_segments)
        return try_expandable(a, p->pool, p->stream, p->rsize, p->hint, out);
    if (a->cfg.capacity && a->reserved.cur + size > a->cfg.capacity)
        return VR_OK;
    if (ensure_spare_seg(a) != VR_OK || ensure_spare(a, 1) != VR_OK)
        return VR_ENOMEM;
    uint64_t base = place_segment(a, size, p->hint);
    if (!base)
        return VR_OK; /* no address space left: like a failed cudaMalloc */
    Segment *s = seg_new(a, base, size, p->stream, p->pool->small, false);
    Block *b = seg_whole_block(a, s);
    stat_add(&a->reserved, size);
    stat_add(&a->segments, 1);
    a->num_segment_allocs++;
    emit(a, ALLOC_EV_SEGMENT_ALLOC, b->addr, size, p->stream);
    *out = b;
    return VR_OK;
}

static bool should_split(const Alloc *a, const Block *b, uint64_t rsize)
{
    uint64_t rem = b->size - rsize;
    if (b->seg->small || a->cfg.expandable_segments)
        return rem >= K_MIN_BLOCK;
    return rsize < a->cfg.max_split_size && rem > K_SMALL_SIZE;
}

/* alloc_found_block (4.1, 4.2): b (out of every set) serves the request, split if it should. */
static Block *alloc_found(Alloc *a, Block *b, uint64_t rsize, uint64_t orig)
{
    bool already_split = is_split(b), exp = b->seg->expandable;
    if (should_split(a, b, rsize)) {
        Block *rem = b;
        b = block_new(a);
        b->addr = rem->addr;
        b->size = rsize;
        b->seg = rem->seg;
        b->stream = rem->stream;
        b->prev = rem->prev;
        if (b->prev)
            b->prev->next = b;
        else
            b->seg->head = b;
        b->next = rem;
        rem->prev = b;
        rem->addr += rsize;
        rem->size -= rsize;
        free_insert(a, rem);
        if (!exp) {
            if (already_split)
                stat_sub(&a->inactive_split, rsize);
            else
                stat_add(&a->inactive_split, rem->size);
        }
    } else if (already_split && !exp) {
        stat_sub(&a->inactive_split, b->size);
    }
    b->allocated = 1;
    b->requested = orig;
    live_put(a, b->addr, b);
    stat_add(&a->allocated, b->size);
    stat_add(&a->active, b->size);
    stat_add(&a->requested, orig);
    return b;
}

/* ---- ideal allocator ---- */

static VrStatus ideal_malloc(Alloc *a, uint64_t size, int stream, uint64_t *addr)
{
    uint64_t r = alloc_round_size(&a->cfg, size);
    if (a->cfg.capacity && a->allocated.cur + r > a->cfg.capacity) {
        a->num_ooms++;
        a->oom = (AllocOomInfo){r, a->cfg.capacity, a->cfg.capacity - a->reserved.cur,
                                a->allocated.cur, 0};
        emit(a, ALLOC_EV_OOM, a->cfg.capacity - a->reserved.cur, r, stream);
        return VR_OOM;
    }
    if (ensure_spare(a, 1) != VR_OK || live_reserve(a) != VR_OK)
        return VR_ENOMEM;
    Block *b = block_new(a);
    b->addr = a->ideal_next;
    a->ideal_next += r;
    b->size = r;
    b->requested = size;
    b->stream = stream;
    b->allocated = 1;
    live_put(a, b->addr, b);
    stat_add(&a->allocated, r);
    stat_add(&a->active, r);
    stat_add(&a->reserved, r);
    stat_add(&a->requested, size);
    *addr = b->addr;
    return VR_OK;
}

static void ideal_free(Alloc *a, Block *b)
{
    live_del(a, b->addr);
    stat_sub(&a->allocated, b->size);
    stat_sub(&a->active, b->size);
    stat_sub(&a->reserved, b->size);
    stat_sub(&a->requested, b->requested);
    block_recycle(a, b);
}

/* ---- the public allocation path (section 5) ---- */

/* What PyTorch's OutOfMemoryError reports for a request of `requested` bytes. VR_OOM. */
static VrStatus record_oom(Alloc *a, uint64_t requested, int stream)
{
    uint64_t cap = a->cfg.capacity;
    a->num_ooms++;
    a->oom.requested = requested;
    a->oom.capacity = cap;
    a->oom.free = cap > a->reserved.cur ? cap - a->reserved.cur : 0;
    a->oom.allocated = a->allocated.cur;
    a->oom.reserved_unallocated = a->reserved.cur - a->allocated.cur;
    emit(a, ALLOC_EV_OOM, a->oom.free, requested, stream);
    return VR_OOM;
}

VrStatus alloc_malloc(Alloc *a, uint64_t size, int stream, uint64_t addr_hint, uint64_t *addr)
{
    *addr = 0;
    /* beyond any card: PyTorch raises OutOfMemoryError for it like any other request */
    if (size > ALLOC_MAX_REQUEST && stream >= 0 && a->cfg.capacity > 0 && size > a->cfg.capacity)
        return record_oom(a, size, stream);
    if (size == 0 || size > ALLOC_MAX_REQUEST || stream < 0)
        return VR_EINVAL;
    if (a->cfg.kind == ALLOC_IDEAL)
        return ideal_malloc(a, size, stream, addr);
    if (ensure_spare(a, 4) != VR_OK || ensure_spare_seg(a) != VR_OK ||
        live_reserve(a) != VR_OK)
        return VR_ENOMEM;
    process_events(a);
    Params p;
    p.rsize = alloc_round_size(&a->cfg, size);
    p.pool = &a->pools[p.rsize <= K_SMALL_SIZE ? 0 : 1];
    p.stream = stream;
    p.alloc_size = allocation_size(p.rsize);
    p.hint = addr_hint;
    Block *b = get_free_block(a, p.pool, stream, p.rsize);
    if (!b) {
        if (a->cfg.fraction_set && a->cfg.gc_threshold > 0)
            garbage_collect(a);
        VrStatus st = alloc_block(a, &p, false, &b);
        if (st != VR_OK)
            return st;
        if (!b && release_available(a, p.pool, stream, p.rsize)) {
            st = alloc_block(a, &p, false, &b);
            if (st != VR_OK)
                return st;
        }
        if (!b) {
            st = release_cached_blocks(a);
            if (st != VR_OK)
                return st;
            st = alloc_block(a, &p, true, &b);
            if (st != VR_OK)
                return st;
        }
    }
    if (!b)
        return record_oom(a, p.rsize, stream);
    /* spare blocks may have been used by the retry path: alloc_found needs one */
    if (ensure_spare(a, 1) != VR_OK) {
        free_insert(a, b); /* give it back whole; the model stays consistent */
        return VR_ENOMEM;
    }
    b = alloc_found(a, b, p.rsize, size);
    *addr = b->addr;
    return VR_OK;
}

/* Room in the event queue for b's stream uses. VR_ENOMEM changes nothing. */
static VrStatus reserve_events(Alloc *a, const Block *b)
{
    if (b->nuses == 0 || a->nev + b->nuses <= a->capev)
        return VR_OK;
    size_t ncap = a->capev ? a->capev * 2 : 64;
    while (ncap < a->nev + b->nuses)
        ncap *= 2;
    Event *ne = host_alloc(a, a->ev, a->capev * sizeof *ne, ncap * sizeof *ne);
    if (!ne)
        return VR_ENOMEM;
    a->ev = ne;
    a->capev = ncap;
    return VR_OK;
}

/* insert_events: one event on each stream b was used on (reserve_events first). */
static void insert_events(Alloc *a, Block *b)
{
    for (uint32_t i = 0; i < b->nuses; i++) {
        a->ev[a->nev++] = (Event){b, b->uses[i], false};
        b->event_count++;
    }
    b->nuses = 0;
}

/* free_requested, the part alloc_dealloc and alloc_free_deferred share: the allocated block at
 * addr stops counting as allocated, with room made for its stream events. *out = the block, or
 * NULL when the ideal allocator freed it outright. VR_EINVAL if addr is not an allocated block,
 * VR_ENOMEM (nothing changed) if the events have no room. */
static VrStatus free_requested(Alloc *a, uint64_t addr, Block **out)
{
    *out = NULL;
    Block *b = live_get(a, addr);
    if (!b || !b->allocated)
        return VR_EINVAL;
    if (a->cfg.kind == ALLOC_IDEAL) {
        ideal_free(a, b);
        return VR_OK;
    }
    if (reserve_events(a, b) != VR_OK)
        return VR_ENOMEM;
    stat_sub(&a->allocated, b->size);
    b->allocated = 0;
    *out = b;
    return VR_OK;
}

VrStatus alloc_dealloc(Alloc *a, uint64_t addr)
{
    Block *b;
    VrStatus st = free_requested(a, addr, &b);
    if (st != VR_OK || !b)
        return st;
    if (b->nuses > 0)
        insert_events(a, b);
    else
        free_block(a, b);
    return VR_OK;
}

VrStatus alloc_free_deferred(Alloc *a, uint64_t addr)
{
    Block *b;
    VrStatus st = free_requested(a, addr, &b);
    if (st != VR_OK || !b)
        return st;
    insert_events(a, b); /* stream uses become events, as in alloc_dealloc */
    b->event_count++;
    b->deferred = 1;
    b->dprev = NULL;
    b->dnext = a->deferred;
    if (a->deferred)
        a->deferred->dprev = b;
    a->deferred = b;
    return VR_OK;
}

VrStatus alloc_free_complete(Alloc *a, uint64_t addr)
{
    Block *b = live_get(a, addr);
    if (!b || !b->deferred)
        return a->cfg.kind == ALLOC_IDEAL ? VR_OK : VR_EINVAL;
    deferred_unlink(a, b);
    if (--b->event_count == 0)
        free_block(a, b);
    return VR_OK;
}

VrStatus alloc_record_stream(Alloc *a, uint64_t addr, int stream)
{
    Block *b = live_get(a, addr);
    if (!b || !b->allocated || stream < 0)
        return VR_EINVAL;
    if (a->cfg.kind == ALLOC_IDEAL || stream == b->stream)
        return VR_OK;
    for (uint32_t i = 0; i < b->nuses; i++)
        if (b->uses[i] == stream)
            return VR_OK;
    if (b->nuses == b->capuses) {
        uint32_t ncap = b->capuses ? b->capuses * 2 : 4;
        int *nu = host_alloc(a, b->uses, b->capuses * sizeof(int), ncap * sizeof(int));
        if (!nu)
            return VR_ENOMEM;
        b->uses = nu;
        b->capuses = ncap;
    }
    b->uses[b->nuses++] = stream;
    return VR_OK;
}

void alloc_sync(Alloc *a)
{
    for (size_t i = 0; i < a->nev; i++)
        a->ev[i].done = true;
}

void alloc_stream_sync(Alloc *a, int stream)
{
    for (size_t i = 0; i < a->nev; i++)
        if (a->ev[i].stream == stream)
            a->ev[i].done = true;
}

void alloc_empty_cache(Alloc *a)
{
    if (a->cfg.kind == ALLOC_IDEAL)
        return;
    /* On host failure release_cached_blocks stops before an unmap; the model stays consistent
     * and merely keeps some pages mapped. */
    (void)release_cached_blocks(a);
}

void alloc_reset_peaks(Alloc *a)
{
    Stat *s[] = {&a->allocated, &a->reserved, &a->active, &a->requested, &a->inactive_split,
                 &a->segments};
    for (size_t i = 0; i < sizeof s / sizeof *s; i++)
        s[i]->peak = s[i]->cur;
}

/* ---- rebuilding the state before a trace (alloc_inject) ---- */

/* Carves [addr, addr + rsize) out of FREE block f as an ALLOCATED block. */
static void carve(Alloc *a, Block *f, uint64_t addr, uint64_t rsize, uint64_t size)
{
    Segment *s = f->seg;
    bool was_split = is_split(f);
    uint64_t fsize = f->size;
    set_erase(a, f);
    split_off_ends(a, f, addr, rsize);
    f->allocated = 1;
    f->requested = size;
    live_put(a, addr, f);
    if (!s->expandable) {
        if (was_split)
            stat_sub(&a->inactive_split, fsize);
        if (is_split(f))
            stat_add(&a->inactive_split, fsize - rsize); /* the free pieces either side */
    }
    stat_add(&a->allocated, rsize);
    stat_add(&a->active, rsize);
    stat_add(&a->requested, size);
}

/* A rebuilt FREE whole segment [base, base + size); the caller checked the arguments. */
static Segment *inject_segment(Alloc *a, uint64_t base, uint64_t size, int stream, bool small)
{
    uint64_t low = a->low_water;
    Segment *s = seg_new(a, base, size, stream, small, false);
    a->low_water = low; /* rebuilt segments do not move the placement of new ones */
    s->injected = true;
    Block *b = seg_whole_block(a, s);
    free_insert(a, b);
    stat_add(&a->reserved, size);
    stat_add(&a->segments, 1);
    a->injected_segments++;
    return s;
}

VrStatus alloc_inject_segment(Alloc *a, uint64_t base, uint64_t size, int stream, bool small)
{
    if (size == 0 || size % K_MIN_BLOCK != 0 || size > ALLOC_MAX_REQUEST * 2 || stream < 0 ||
        base == 0 || base % K_MIN_BLOCK != 0 || base >= ADDR_LIMIT || size >= ADDR_LIMIT - base ||
        (small && size > K_SMALL_BUFFER))
        return VR_EINVAL;
    if (a->cfg.kind == ALLOC_IDEAL)
        return VR_OK; /* the ideal allocator keeps no cache */
    if (seg_overlaps(a, base, size))
        return VR_EINVAL;
    if (a->cfg.capacity && a->reserved.cur + size > a->cfg.capacity)
        return VR_OOM;
    if (ensure_spare(a, 1) != VR_OK || ensure_spare_seg(a) != VR_OK)
        return VR_ENOMEM;
    inject_segment(a, base, size, stream, small);
    return VR_OK;
}

VrStatus alloc_inject(Alloc *a, uint64_t addr, uint64_t size, int stream)
{
    return alloc_inject_block(a, addr, size, 0, stream);
}

VrStatus alloc_inject_block(Alloc *a, uint64_t addr, uint64_t size, uint64_t bytes, int stream)
{
    if (size == 0 || size > ALLOC_MAX_REQUEST || stream < 0 || addr == 0 ||
        addr % K_MIN_BLOCK != 0 || addr >= ADDR_LIMIT)
        return VR_EINVAL;
    if (a->cfg.kind == ALLOC_IDEAL) {
        uint64_t got;
        return ideal_malloc(a, size, stream, &got);
    }
    if (ensure_spare(a, 2) != VR_OK || ensure_spare_seg(a) != VR_OK ||
        live_reserve(a) != VR_OK)
        return VR_ENOMEM;
    uint64_t rsize = alloc_round_size(&a->cfg, size);
    bool small = rsize <= K_SMALL_SIZE;
    if (bytes) {
        if (bytes < rsize || bytes % K_MIN_BLOCK != 0 || bytes > ALLOC_MAX_REQUEST * 2 ||
            (small && bytes > K_SMALL_BUFFER))
            return VR_EINVAL;
        rsize = bytes;
    }
    Segment *s = seg_containing(a, addr);
    if (!s) {
        uint64_t segsize = small ? K_SMALL_BUFFER : allocation_size(rsize);
        uint64_t base = small ? addr & ~(K_SMALL_BUFFER - 1) : addr;
        if (base == 0 || seg_overlaps(a, base, segsize))
            base = addr; /* address 0 is never a block (the live map's empty key) */
        /* end at the next segment if it starts earlier */
        TNode *n = t_lower(a->segs, 0, 0, base + 1);
        if (n && ((Segment *)n)->base < base + segsize)
            segsize = ((Segment *)n)->base - base;
        if (segsize < addr - base + rsize)
            return VR_EINVAL;
        if (a->cfg.capacity && a->reserved.cur + segsize > a->cfg.capacity)
            return VR_OOM;
        s = inject_segment(a, base, segsize, stream, small);
    }
    if (s->small != small || s->stream != stream || s->expandable)
        return VR_EINVAL;
    /* find the block containing addr: from the last injected block when it is before addr */
    Block *f = NULL;
    Block *cur = live_get(a, a->inject_cursor);
    if (cur && cur->seg == s && cur->addr <= addr)
        f = cur;
    else
        f = s->head;
    while (f && f->addr + f->size <= addr)
        f = f->next;
    if (!f || f->where != IN_FREE || addr + rsize > f->addr + f->size)
        return VR_EINVAL;
    carve(a, f, addr, rsize, size);
    a->inject_cursor = addr;
    return VR_OK;
}

/* ---- readers ---- */

uint64_t alloc_block_size(const Alloc *a, uint64_t addr)
{
    Block *b = live_get(a, addr);
    return b && b->allocated ? b->size : 0;
}

int alloc_block_stream(const Alloc *a, uint64_t addr)
{
    Block *b = live_get(a, addr);
    return b && b->allocated ? b->stream : -1;
}

uint64_t alloc_allocated_bytes(const Alloc *a)
{
    return a->allocated.cur;
}

uint64_t alloc_reserved_bytes(const Alloc *a)
{
    return a->reserved.cur;
}

uint64_t alloc_num_alloc_retries(const Alloc *a)
{
    return a->num_alloc_retries;
}

/* Largest FREE block over both pools and all streams: the last block of each stream. */
static uint64_t largest_free(const Alloc *a)
{
    uint64_t best = 0;
    for (int i = 0; i < 2; i++) {
        TNode *root = a->pools[i].free;
        TNode *n = t_last(root);
        while (n) {
            if (n->k1 > best)
                best = n->k1;
            n = t_below(root, n->k0, 0, 0);
        }
    }
    return best;
}

void alloc_stats(const Alloc *a, AllocStats *out)
{
    memset(out, 0, sizeof *out);
    out->allocated = a->allocated.cur;
    out->allocated_peak = a->allocated.peak;
    out->reserved = a->reserved.cur;
    out->reserved_peak = a->reserved.peak;
    out->active = a->active.cur;
    out->active_peak = a->active.peak;
    out->requested = a->requested.cur;
    out->requested_peak = a->requested.peak;
    out->inactive_split = a->inactive_split.cur;
    out->inactive_split_peak = a->inactive_split.peak;
    out->segments = a->segments.cur;
    out->segments_peak = a->segments.peak;
    out->num_segment_allocs = a->num_segment_allocs;
    out->num_segment_frees = a->num_segment_frees;
    out->num_segment_unmaps = a->num_segment_unmaps;
    out->num_alloc_retries = a->num_alloc_retries;
    out->num_ooms = a->num_ooms;
    out->injected_segments = a->injected_segments;
    out->largest_free_block = largest_free(a);
}

void alloc_last_oom(const Alloc *a, AllocOomInfo *out)
{
    *out = a->oom;
}

static void fmt_size(uint64_t b, char *buf, size_t len)
{
    /* PyTorch's format_size */
    if (b <= 1024)
        snprintf(buf, len, "%" PRIu64 " bytes", b);
    else if (b <= 1048576)
        snprintf(buf, len, "%.2f KiB", (double)b / 1024.0);
    else if (b <= 1073741824)
        snprintf(buf, len, "%.2f MiB", (double)b / 1048576.0);
    else
        snprintf(buf, len, "%.2f GiB", (double)b / 1073741824.0);
}

void alloc_format_oom(const AllocOomInfo *info, bool fraction_set, char *buf, size_t len)
{
    char req[32], cap[32], fr[32], al[32], ru[32];
    fmt_size(info->requested, req, sizeof req);
    fmt_size(info->capacity, cap, sizeof cap);
    fmt_size(info->free, fr, sizeof fr);
    fmt_size(info->allocated, al, sizeof al);
    fmt_size(info->reserved_unallocated, ru, sizeof ru);
    if (fraction_set) /* PyTorch: "... N allowed; Of the allocated memory ..." */
        snprintf(buf, len,
                 "CUDA out of memory. Tried to allocate %s. %s allowed (%s of it free); Of the "
                 "allocated memory %s is allocated by PyTorch, and %s is reserved by PyTorch but "
                 "unallocated.",
                 req, cap, fr, al, ru);
    else
        snprintf(buf, len,
                 "CUDA out of memory. Tried to allocate %s. GPU has a total capacity of %s of "
                 "which %s is free. Of the allocated memory %s is allocated by PyTorch, and %s is "
                 "reserved by PyTorch but unallocated.",
                 req, cap, fr, al, ru);
}

/* Blocks of one segment in address order, appended to out[*n]. */
static void seg_blocks(const Segment *s, AllocBlockInfo *out, size_t *n)
{
    for (const Block *b = s->head; b; b = b->next) {
        if (!b->mapped)
            continue;
        out[*n] = (AllocBlockInfo){s->base, b->addr, b->size, b->stream, b->allocated != 0,
                                   s->small};
        (*n)++;
    }
}

static size_t count_seg_blocks(const Segment *s)
{
    size_t n = 0;
    for (const Block *b = s->head; b; b = b->next)
        n += b->mapped;
    return n;
}

/* In-order walk of the segment tree with an explicit stack (depth is O(log n) expected, but a
 * fixed stack is not trusted: it grows on the heap). */
typedef void (*SegVisit)(const Segment *s, void *ud);

static VrStatus seg_walk(const Alloc *a, SegVisit fn, void *ud)
{
    size_t cap = 64, n = 0;
    TNode *local[64];
    TNode **stack = local;
    Alloc *ma = (Alloc *)a; /* host_alloc takes a non-const Alloc; it does not change the model */
    TNode *t = a->segs;
    VrStatus st = VR_OK;
    while (t || n) {
        while (t) {
            if (n == cap) {
                TNode **ns = host_alloc(ma, stack == local ? NULL : stack,
                                        stack == local ? 0 : cap * sizeof *ns,
                                        cap * 2 * sizeof *ns);
                if (!ns) {
                    st = VR_ENOMEM;
                    goto out;
                }
                if (stack == local)
                    memcpy(ns, local, sizeof local);
                stack = ns;
                cap *= 2;
            }
            stack[n++] = t;
            t = t->l;
        }
        t = stack[--n];
        fn((const Segment *)t, ud);
        t = t->r;
    }
out:
    if (stack != local)
        host_alloc(ma, stack, cap * sizeof *stack, 0);
    return st;
}

typedef struct MapCtx {
    AllocBlockInfo *out;
    size_t n;
} MapCtx;

static void visit_count(const Segment *s, void *ud)
{
    ((MapCtx *)ud)->n += count_seg_blocks(s);
}

static void visit_copy(const Segment *s, void *ud)
{
    MapCtx *c = ud;
    seg_blocks(s, c->out, &c->n);
}

VrStatus alloc_segment_map(const Alloc *a, AllocBlockInfo **blocks, size_t *n)
{
    *blocks = NULL;
    *n = 0;
    MapCtx c = {NULL, 0};
    VrStatus st = seg_walk(a, visit_count, &c);
    if (st != VR_OK)
        return st;
    if (c.n == 0)
        return VR_OK;
    /* the caller frees with free(): plain malloc, not the hook */
    c.out = malloc(c.n * sizeof *c.out);
    if (!c.out)
        return VR_ENOMEM;
    c.n = 0;
    st = seg_walk(a, visit_copy, &c);
    if (st != VR_OK) {
        free(c.out);
        return st;
    }
    *blocks = c.out;
    *n = c.n;
    return VR_OK;
}

/* ---- alloc_clone ---- */

/* The copy of old block ob in the clone (m maps old Block * -> new Block *), made here the first
 * time: its fields but for the links, which alloc_clone sets. NULL when out of host memory. */
static Block *clone_block(Alloc *a, U64Map *m, const Block *ob)
{
    uint64_t v;
    if (u64map_get(m, (uint64_t)(uintptr_t)ob, &v))
        return (Block *)(uintptr_t)v;
    if (ensure_spare(a, 1) != VR_OK || u64map_reserve(m, 1) != VR_OK)
        return NULL;
    Block *b = block_new(a);
    if (ob->nuses) {
        if (b->capuses < ob->nuses) {
            int *u = host_alloc(a, b->uses, b->capuses * sizeof(int), ob->nuses * sizeof(int));
            if (!u) {
                block_recycle(a, b);
                return NULL;
            }
            b->uses = u;
            b->capuses = ob->nuses;
        }
        memcpy(b->uses, ob->uses, ob->nuses * sizeof(int));
    }
    b->node.k0 = ob->node.k0;
    b->node.k1 = ob->node.k1;
    b->node.k2 = ob->node.k2;
    b->addr = ob->addr;
    b->size = ob->size;
    b->requested = ob->requested;
    b->gc_base = ob->gc_base;
    b->nuses = ob->nuses;
    b->event_count = ob->event_count;
    b->stream = ob->stream;
    b->allocated = ob->allocated;
    b->mapped = ob->mapped;
    b->where = ob->where;
    b->deferred = ob->deferred;
    (void)u64map_put(m, (uint64_t)(uintptr_t)ob, (uint64_t)(uintptr_t)b);
    return b;
}

typedef struct CloneCtx {
    Alloc *a;
    U64Map *m;
    VrStatus st;
} CloneCtx;

/* Copies segment os and its blocks into the clone, each FREE or UNMAPPED block into its pool's
 * set. */
static void clone_segment(const Segment *os, void *ud)
{
    CloneCtx *c = ud;
    Alloc *a = c->a;
    if (c->st != VR_OK)
        return;
    if (ensure_spare_seg(a) != VR_OK) {
        c->st = VR_ENOMEM;
        return;
    }
    Segment *s = a->spare_seg;
    a->spare_seg = NULL;
    *s = *os;
    s->node.l = s->node.r = NULL;
    s->node.prio = next_prio(a);
    s->head = NULL;
    t_insert(&a->segs, &s->node);
    Block *prev = NULL;
    for (const Block *ob = os->head; ob; ob = ob->next) {
        Block *b = clone_block(a, c->m, ob);
        if (!b) {
            c->st = VR_ENOMEM;
            return;
        }
        b->seg = s;
        b->prev = prev;
        if (prev)
            prev->next = b;
        else
            s->head = b;
        prev = b;
        if (b->where == IN_FREE || b->where == IN_UNMAPPED) {
            Pool *p = pool_of(a, b);
            b->node.prio = next_prio(a);
            if (b->where == IN_FREE)
                fs_insert(p, b);
            else
                t_insert(&p->unmapped, &b->node);
        }
    }
}

VrStatus alloc_clone(const Alloc *src, Alloc **out)
{
    *out = NULL;
    Alloc *a;
    VrStatus st = alloc_new(&src->cfg, &a);
    if (st != VR_OK)
        return st;
    for (int i = 0; i < 2; i++) {
        a->pools[i].gc_calls = src->pools[i].gc_calls;
        a->pools[i].small = src->pools[i].small;
    }
    a->allocated = src->allocated;
    a->reserved = src->reserved;
    a->active = src->active;
    a->requested = src->requested;
    a->inactive_split = src->inactive_split;
    a->segments = src->segments;
    a->num_segment_allocs = src->num_segment_allocs;
    a->num_segment_frees = src->num_segment_frees;
    a->num_segment_unmaps = src->num_segment_unmaps;
    a->num_alloc_retries = src->num_alloc_retries;
    a->num_ooms = src->num_ooms;
    a->injected_segments = src->injected_segments;
    a->low_water = src->low_water;
    a->ideal_next = src->ideal_next;
    a->inject_cursor = src->inject_cursor;
    a->oom = src->oom;
    U64Map m;
    u64map_init(&m, src->cfg.host_alloc, src->cfg.host_ud);
    CloneCtx c = {a, &m, VR_OK};
    /* the segments with their blocks, then the live blocks (the ideal allocator's lie in no
     * segment), the events and the deferred list, each pointing at the clone's blocks */
    st = seg_walk(src, clone_segment, &c);
    if (st == VR_OK)
        st = c.st;
    size_t pos = 0;
    uint64_t addr, v;
    while (st == VR_OK && u64map_next(&src->live, &pos, &addr, &v)) {
        Block *b = clone_block(a, &m, (const Block *)(uintptr_t)v);
        if (!b || u64map_reserve(&a->live, 1) != VR_OK)
            st = VR_ENOMEM;
        else
            live_put(a, addr, b);
    }
    if (st == VR_OK && src->nev) {
        a->ev = host_alloc(a, NULL, 0, src->capev * sizeof *a->ev);
        if (!a->ev)
            st = VR_ENOMEM;
        else
            a->capev = src->capev;
        for (size_t i = 0; st == VR_OK && i < src->nev; i++) {
            Block *b = clone_block(a, &m, src->ev[i].b);
            if (!b)
                st = VR_ENOMEM;
            else
                a->ev[a->nev++] = (Event){b, src->ev[i].stream, src->ev[i].done};
        }
    }
    Block *last = NULL;
    for (const Block *ob = src->deferred; st == VR_OK && ob; ob = ob->dnext) {
        Block *b = clone_block(a, &m, ob);
        if (!b) {
            st = VR_ENOMEM;
            break;
        }
        b->dprev = last;
        if (last)
            last->dnext = b;
        else
            a->deferred = b;
        last = b;
    }
    u64map_free(&m);
    if (st != VR_OK) {
        alloc_free(a);
        return st;
    }
    *out = a;
    return VR_OK;
}

/* ---- alloc_same_state ---- */

static bool same_block(const Block *x, const Block *y)
{
    return x->addr == y->addr && x->size == y->size && x->requested == y->requested &&
           x->gc_base == y->gc_base && x->nuses == y->nuses && x->event_count == y->event_count &&
           x->stream == y->stream && x->allocated == y->allocated && x->mapped == y->mapped &&
           x->where == y->where && x->deferred == y->deferred &&
           (x->nuses == 0 || memcmp(x->uses, y->uses, x->nuses * sizeof(int)) == 0);
}

/* In-order walk of a segment tree without host memory: NULL at the end, or with it->deep set
 * when the tree is deeper than the stack (the caller then answers "cannot tell"). */
typedef struct SegIter {
    const TNode *stack[160];
    int n;
    const TNode *t;
    bool deep;
} SegIter;

static const Segment *seg_iter_next(SegIter *it)
{
    while (it->t) {
        if (it->n == (int)(sizeof it->stack / sizeof it->stack[0])) {
            it->deep = true;
            return NULL;
        }
        it->stack[it->n++] = it->t;
        it->t = it->t->l;
    }
    if (it->n == 0)
        return NULL;
    const TNode *t = it->stack[--it->n];
    it->t = t->r;
    return (const Segment *)t;
}

static bool same_stat(Stat x, Stat y) { return x.cur == y.cur && x.peak == y.peak; }

bool alloc_same_state(const Alloc *a, const Alloc *b)
{
    for (int i = 0; i < 2; i++)
        if (a->pools[i].gc_calls != b->pools[i].gc_calls || a->pools[i].small != b->pools[i].small)
            return false;
    if (!same_stat(a->allocated, b->allocated) || !same_stat(a->reserved, b->reserved) ||
        !same_stat(a->active, b->active) || !same_stat(a->requested, b->requested) ||
        !same_stat(a->inactive_split, b->inactive_split) || !same_stat(a->segments, b->segments))
        return false;
    if (a->low_water != b->low_water || a->ideal_next != b->ideal_next ||
        a->inject_cursor != b->inject_cursor || a->nev != b->nev ||
        u64map_count(&a->live) != u64map_count(&b->live))
        return false;
    /* the segments in address order, each with its blocks */
    SegIter ia = {.t = a->segs}, ib = {.t = b->segs};
    for (;;) {
        const Segment *x = seg_iter_next(&ia), *y = seg_iter_next(&ib);
        if (ia.deep || ib.deep || !x != !y)
            return false;
        if (!x)
            break;
        if (x->base != y->base || x->size != y->size || x->page != y->page ||
            x->stream != y->stream || x->small != y->small || x->expandable != y->expandable ||
            x->injected != y->injected)
            return false;
        const Block *p = x->head, *q = y->head;
        for (; p && q; p = p->next, q = q->next)
            if (!same_block(p, q))
                return false;
        if (p || q)
            return false;
    }
    /* the live blocks (the ideal allocator's lie in no segment), the events, the deferred list */
    size_t pos = 0;
    uint64_t addr, v;
    while (u64map_next(&a->live, &pos, &addr, &v)) {
        const Block *y = live_get(b, addr);
        if (!y || !same_block((const Block *)(uintptr_t)v, y))
            return false;
    }
    for (size_t i = 0; i < a->nev; i++)
        if (a->ev[i].stream != b->ev[i].stream || a->ev[i].done != b->ev[i].done ||
            !same_block(a->ev[i].b, b->ev[i].b))
            return false;
    const Block *p = a->deferred, *q = b->deferred;
    for (; p && q; p = p->dnext, q = q->dnext)
        if (!same_block(p, q))
            return false;
    return !p && !q;
}

/* ---- alloc_check ---- */

typedef struct CheckCtx {
    const Alloc *a;
    bool ok;
    uint64_t reserved, allocated, pending, freeb, requested, inactive, nsegs;
    size_t nlive, nfree, nunmapped;
    uint64_t prev_end;
    const char *why;
} CheckCtx;

#define CHECK(c, cond, msg)                                                                        \
    do {                                                                                           \
        if (!(cond) && (c)->ok) {                                                                  \
            (c)->ok = false;                                                                       \
            (c)->why = (msg);                                                                      \
        }                                                                                          \
    } while (0)

static void visit_check(const Segment *s, void *ud)
{
    CheckCtx *c = ud;
    const Alloc *a = c->a;
    CHECK(c, s->base >= c->prev_end, "segments overlap");
    c->prev_end = s->base + s->size;
    CHECK(c, s->head && s->head->addr == s->base && !s->head->prev, "segment head");
    if (!s->expandable) {
        c->reserved += s->size;
        c->nsegs++;
    }
    uint64_t at = s->base;
    bool split = s->head && s->head->next;
    for (const Block *b = s->head; b; b = b->next) {
        CHECK(c, b->seg == s, "block in wrong segment");
        CHECK(c, b->addr == at, "blocks do not tile the segment");
        CHECK(c, b->size > 0 && b->size % K_MIN_BLOCK == 0, "block size");
        CHECK(c, b->stream == s->stream, "block stream");
        CHECK(c, !b->next || b->next->prev == b, "next/prev links");
        at += b->size;
        if (!b->mapped) {
            CHECK(c, s->expandable, "unmapped block outside an expandable segment");
            CHECK(c, b->where == IN_UNMAPPED, "unmapped block not in the unmapped set");
            CHECK(c, (b->addr - s->base) % s->page == 0 && b->size % s->page == 0,
                  "unmapped block not page aligned");
            CHECK(c, !b->next || b->next->mapped, "two unmapped neighbours");
            c->nunmapped++;
            continue;
        }
        if (s->expandable)
            c->reserved += b->size;
        if (b->allocated) {
            CHECK(c, b->where == IN_NONE && live_get(a, b->addr) == b, "allocated block");
            CHECK(c, !b->deferred, "allocated block on the deferred list");
            c->allocated += b->size;
            c->requested += b->requested;
            c->nlive++;
        } else if (b->event_count > 0) {
            CHECK(c, b->where == IN_NONE && live_get(a, b->addr) == b, "pending block");
            c->pending += b->size;
            c->requested += b->requested;
            c->nlive++;
        } else {
            CHECK(c, b->where == IN_FREE, "free block not in the free set");
            CHECK(c, live_get(a, b->addr) != b, "free block in the live map");
            CHECK(c, !b->next || !(b->next->mapped && !b->next->allocated &&
                                   b->next->event_count == 0),
                  "two free neighbours");
            c->freeb += b->size;
            c->nfree++;
            if (!s->expandable && split)
                c->inactive += b->size;
        }
    }
    CHECK(c, at == s->base + s->size, "blocks do not end at the segment end");
}

/* Checks treap order and heap property; counts nodes. */
static bool check_tree(const TNode *t, size_t *count, size_t limit)
{
    /* iterative in-order with parent-less walk: use Morris-free recursion bounded by depth */
    if (!t)
        return true;
    if (*count > limit)
        return false;
    if (t->l && (t->l->prio > t->prio || !NODE_LT(t->l, t)))
        return false;
    if (t->r && (t->r->prio > t->prio || !NODE_LT(t, t->r)))
        return false;
    (*count)++;
    return check_tree(t->l, count, limit) && check_tree(t->r, count, limit);
}

/* Checks a pool's free set (see "a pool's free set"): the tree of heads and each head's others
 * ordered, heads of distinct (stream, size) below the others of theirs, walked in increasing
 * order by fs_next; counts the blocks into *count. */
static bool check_free_set(const Pool *p, size_t *count, size_t limit)
{
    size_t heads = 0;
    if (!check_tree(p->free, &heads, limit))
        return false;
    *count += heads;
    for (TNode *h = t_first(p->free); h; h = t_next(p->free, h)) {
        const Block *hb = (const Block *)h;
        if (!hb->head || hb->where != IN_FREE || !check_tree(hb->same, count, limit))
            return false;
        for (TNode *m = t_first(hb->same); m; m = t_next(hb->same, m))
            if (((const Block *)m)->head || m->k0 != h->k0 || m->k1 != h->k1 || m->k2 <= h->k2)
                return false;
    }
    const TNode *prev = NULL;
    size_t walked = 0;
    for (TNode *n = fs_first(p); n; n = fs_next(p, n), walked++) {
        if (prev && (!NODE_LT(prev, n) || fs_prev(p, n) != prev))
            return false;
        prev = n;
    }
    return walked == *count;
}

VrStatus alloc_check(const Alloc *a)
{
    if (a->cfg.kind == ALLOC_IDEAL) {
        uint64_t sum = 0, v;
        for (size_t pos = 0; u64map_next(&a->live, &pos, NULL, &v);)
            sum += ((const Block *)(uintptr_t)v)->size;
        if (sum != a->allocated.cur || a->reserved.cur != a->allocated.cur ||
            a->active.cur != a->allocated.cur)
            return VR_EINVAL;
        if (a->cfg.capacity && a->reserved.cur > a->cfg.capacity)
            return VR_EINVAL;
        return VR_OK;
    }
    CheckCtx c = {0};
    c.a = a;
    c.ok = true;
    if (seg_walk(a, visit_check, &c) != VR_OK)
        return VR_ENOMEM;
    CHECK(&c, c.reserved == a->reserved.cur, "reserved != sum of segments");
    CHECK(&c, c.allocated == a->allocated.cur, "allocated != sum of allocated blocks");
    CHECK(&c, c.reserved == c.allocated + c.freeb + c.pending,
          "reserved != allocated + free + pending");
    CHECK(&c, a->active.cur == c.allocated + c.pending, "active != allocated + pending");
    CHECK(&c, a->requested.cur == c.requested, "requested");
    CHECK(&c, a->inactive_split.cur == c.inactive, "inactive_split");
    CHECK(&c, a->segments.cur == c.nsegs, "segment count");
    CHECK(&c, u64map_count(&a->live) == c.nlive, "live map size");
    CHECK(&c, !a->cfg.capacity || a->reserved.cur <= a->cfg.capacity, "reserved > capacity");
    size_t nf = 0, nu = 0, limit = (size_t)-1;
    for (int i = 0; i < 2; i++) {
        size_t np = 0;
        CHECK(&c, check_free_set(&a->pools[i], &np, limit), "free set order");
        nf += np;
        CHECK(&c, check_tree(a->pools[i].unmapped, &nu, limit), "unmapped set order");
    }
    CHECK(&c, nf == c.nfree, "free set size");
    CHECK(&c, nu == c.nunmapped, "unmapped set size");
    size_t ndef = 0;
    for (const Block *b = a->deferred; b; b = b->dnext) {
        CHECK(&c, b->deferred && b->event_count > 0 && !b->allocated, "deferred block state");
        ndef++;
    }
    for (size_t i = 0; i < a->nev; i++)
        CHECK(&c, a->ev[i].b->event_count > 0 && !a->ev[i].b->allocated, "event block state");
    if (!c.ok) {
        fprintf(stderr, "alloc_check: %s\n", c.why);
        return VR_EINVAL;
    }
    return VR_OK;
}
