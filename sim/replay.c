/* replay.c: reads PyTorch allocator traces (CSV, gzip CSV, or the JSON of
 * tools/snapshot_to_json.py) and replays their alloc/free events through the allocator model.
 *
 * Reading happens in one pass that also checks the trace: every address goes through the states
 *   unknown --alloc--> LIVE --free_requested--> PENDING --free_completed--> FREED --alloc--> LIVE
 * and any other step is an error naming the line. A free of an unknown address means the block was
 * live before the trace began: it is recorded in Trace.pre, and the replay places it first
 * (alloc_inject_block); a segment freed before it is allocated (or a snapshot segment the trace
 * never allocates) existed before too: Trace.preseg, placed before the blocks
 * (alloc_inject_segment). CSV is read as a stream (csv_feed), whole lines at a time, so a trace of
 * any length needs memory only for its events. Invariants of a loaded Trace:
 *   every TA_FREE / TA_FREE_REQUESTED addr is LIVE at that point of the replay (allocated earlier
 *   in ev or listed in pre); every TA_FREE_COMPLETED follows its TA_FREE_REQUESTED;
 *   n_alloc + |pre| >= n_free;  stream < nstreams for every event and block.
 * Replay (replay_run_checked) keeps a map only for the trace addresses the model placed elsewhere
 * and for pending frees; every other trace address is its own model address.
 */
#include "replay.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <libdeflate.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "infile.h"
#include "jsonin.h"
#include "u64map.h"

/* A trace's text (after inflating a gzip file) past this is refused as it is read, so a gzip
 * bomb stops there, not when memory runs out: the largest real trace here, SDXL's from process
 * start, is 9 MB of text; 1 GiB is some 20 million events. */
#define MAX_TRACE_BYTES ((uint64_t)1 << 30)
/* A JSON trace is parsed whole, and cJSON holds some ten times the text: a snapshot's JSON past
 * this is refused (a snapshot's ring buffer of a million entries is about 100 MB). */
#define MAX_JSON_TRACE_BYTES ((uint64_t)256 << 20)
/* A gzip file's text may be at most this many times the file, and at least MIN_TEXT_LIMIT,
 * whatever the ratio (up to MAX_TRACE_BYTES): the traces here inflate 7 to 37 times, a gzip
 * bomb (deflate's ratio reaches 1032) past this limit is refused as it inflates, before it takes
 * the memory or the time of its text. */
#define TEXT_RATIO_MAX 100
#define MIN_TEXT_LIMIT ((uint64_t)64 << 20)
#define MAX_SEGMENT_BYTES ((uint64_t)1 << 48)
#define MAX_SEQ_SUM ((int64_t)1 << 62)

/* ---- growing arrays ---- */

static VrStatus grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return VR_OK;
    size_t ncap = *cap ? *cap : 256;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / elem)
            return VR_ENOMEM;
        ncap *= 2;
    }
    void *np = realloc(*p, ncap * elem);
    if (!np)
        return VR_ENOMEM;
    *p = np;
    *cap = ncap;
    return VR_OK;
}

/* ---- the reader's state ---- */

enum { ST_LIVE = 1, ST_PENDING, ST_FREED };

typedef struct AddrState {
    uint64_t size;   /* unrounded request of the live block */
    uint32_t line;   /* line of the event that set the state */
    uint32_t stream; /* dense index */
    uint8_t state;
} AddrState;

typedef struct Reader {
    Trace *t;
    char *err;
    size_t errlen;
    U64Map addrs;        /* addr -> index into st (u64map.h, as all maps here) */
    AddrState *st;
    size_t nst, capst;
    U64Map streams;      /* trace stream value + 1 -> first-seen index (value UINT64_MAX rejected) */
    size_t capstreams, cappre, cappreseg;
    U64Map segfirst;     /* segment address -> 1 first seen allocated, 2 first seen freed */
    int64_t running;     /* measured reserved */
    bool in_run;         /* inside a run of segment_free / segment_unmap */
    size_t run_start;    /* index in ev of the run's first event */
    bool have_seq;
    uint64_t last_seq;
    uint32_t last_seq_line;
    bool have_last_stream; /* last_stream caches the last stream looked up */
    uint64_t last_stream;
    uint32_t last_stream_index;
    bool header_done;    /* CSV: the header line has been read */
    int col[6];          /* CSV: column of each of col_names, -1 if absent */
    int need;            /* CSV: fields a line must have */
    int field_col[12];   /* CSV: the col_names index field i holds, -1 for none (i < need) */
    uint32_t lineno;     /* CSV: current line */
} Reader;

static VrStatus fail(Reader *r, uint32_t line, const char *fmt, ...)
{
    if (r->err && r->errlen) {
        int n = line == 0    ? snprintf(r->err, r->errlen, "%s: ", r->t->name)
                : r->t->json ? snprintf(r->err, r->errlen, "%s: entry %" PRIu32 ": ", r->t->name, line)
                             : snprintf(r->err, r->errlen, "%s:%" PRIu32 ": ", r->t->name, line);
        if (n < 0)
            n = 0;
        if ((size_t)n < r->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
        /* one line, whatever bytes the trace held */
        for (char *c = r->err; *c; c++)
            if ((unsigned char)*c < 32 || *c == 127)
                *c = '?';
    }
    return VR_EINVAL;
}

static VrStatus oom_msg(Reader *r)
{
    if (r->err && r->errlen)
        snprintf(r->err, r->errlen, "%s: out of host memory while reading the trace", r->t->name);
    return VR_ENOMEM;
}

/* Dense index of a trace stream value (first-seen order; renumbered by value at the end). */
static VrStatus stream_index(Reader *r, uint64_t value, uint32_t line, uint32_t *out)
{
    if (value == UINT64_MAX)
        return fail(r, line, "stream %" PRIu64 " out of range", value);
    if (r->have_last_stream && value == r->last_stream) { /* nearly every event */
        *out = r->last_stream_index;
        return VR_OK;
    }
    uint64_t v;
    if (u64map_get(&r->streams, value + 1, &v)) {
        *out = (uint32_t)v;
        r->have_last_stream = true;
        r->last_stream = value;
        r->last_stream_index = (uint32_t)v;
        return VR_OK;
    }
    Trace *t = r->t;
    if (t->nstreams >= INT32_MAX)
        return fail(r, line, "too many streams");
    if (grow((void **)&t->streams, &r->capstreams, t->nstreams + 1, sizeof *t->streams) != VR_OK ||
        u64map_put(&r->streams, value + 1, t->nstreams) != VR_OK)
        return oom_msg(r);
    t->streams[t->nstreams] = value;
    *out = (uint32_t)t->nstreams++;
    return VR_OK;
}

static VrStatus push_event(Reader *r, TraceAction a, uint64_t addr, uint64_t size, uint32_t stream,
                           uint32_t line)
{
    Trace *t = r->t;
    if (grow((void **)&t->ev, &t->cap, t->n + 1, sizeof *t->ev) != VR_OK)
        return oom_msg(r);
    TraceEvent *e = &t->ev[t->n++];
    memset(e, 0, sizeof *e); /* padding too: traces compare with memcmp in tests */
    e->addr = addr;
    e->size = size;
    e->line = line;
    e->stream = stream;
    e->action = (uint8_t)a;
    return VR_OK;
}

static VrStatus push_pre(Reader *r, uint64_t addr, uint64_t size, uint32_t stream, uint32_t line)
{
    Trace *t = r->t;
    if (grow((void **)&t->pre, &r->cappre, t->npre + 1, sizeof *t->pre) != VR_OK)
        return oom_msg(r);
    TraceBlock *b = &t->pre[t->npre++];
    memset(b, 0, sizeof *b);
    b->addr = addr;
    b->size = size;
    b->stream = stream;
    b->line = line;
    return VR_OK;
}

/* Notes the first event seen for a segment address; a segment first seen freed (or only in the
 * snapshot) existed before the trace began and is rebuilt (preseg). */
static VrStatus seg_seen(Reader *r, uint64_t addr, uint64_t size, uint32_t stream, uint32_t line,
                         bool freed, bool small)
{
    if (addr == 0 || addr % 512 || size % 512 || addr >= ((uint64_t)1 << 62) ||
        size > ((uint64_t)1 << 44))
        return VR_OK; /* not a place a segment can be: nothing to rebuild */
    if (u64map_get(&r->segfirst, addr, NULL))
        return VR_OK;
    if (u64map_put(&r->segfirst, addr, freed ? 2 : 1) != VR_OK)
        return oom_msg(r);
    if (!freed)
        return VR_OK;
    Trace *t = r->t;
    if (grow((void **)&t->preseg, &r->cappreseg, t->npreseg + 1, sizeof *t->preseg) != VR_OK)
        return oom_msg(r);
    t->preseg[t->npreseg++] = (TraceSegment){addr, size, stream, line, small};
    return VR_OK;
}

static AddrState *addr_state(Reader *r, uint64_t addr)
{
    uint64_t v;
    return u64map_get(&r->addrs, addr, &v) ? &r->st[v] : NULL;
}

static VrStatus addr_new(Reader *r, uint64_t addr, AddrState **out)
{
    if (r->nst >= UINT32_MAX ||
        grow((void **)&r->st, &r->capst, r->nst + 1, sizeof *r->st) != VR_OK ||
        u64map_put(&r->addrs, addr, r->nst) != VR_OK)
        return oom_msg(r);
    *out = &r->st[r->nst++];
    memset(*out, 0, sizeof **out);
    return VR_OK;
}

static const char *state_name(uint8_t s)
{
    return s == ST_LIVE ? "allocated" : s == ST_PENDING ? "waiting for free_completed" : "freed";
}

typedef enum RawAction {
    RA_ALLOC, RA_FREE_REQUESTED, RA_FREE_COMPLETED, RA_SEGMENT_ALLOC, RA_SEGMENT_FREE,
    RA_SEGMENT_MAP, RA_SEGMENT_UNMAP, RA_OOM, RA_IGNORED, RA_UNKNOWN
} RawAction;

static RawAction action_of(const char *s, size_t n)
{
#define IS(lit) (n == sizeof(lit) - 1 && memcmp(s, lit, n) == 0)
    if (IS("alloc"))
        return RA_ALLOC;
    if (IS("free_requested"))
        return RA_FREE_REQUESTED;
    if (IS("free_completed"))
        return RA_FREE_COMPLETED;
    if (IS("segment_alloc"))
        return RA_SEGMENT_ALLOC;
    if (IS("segment_free"))
        return RA_SEGMENT_FREE;
    if (IS("segment_map"))
        return RA_SEGMENT_MAP;
    if (IS("segment_unmap"))
        return RA_SEGMENT_UNMAP;
    if (IS("oom"))
        return RA_OOM;
    if (IS("snapshot") || IS("user_defined") || IS("free"))
        return IS("free") ? RA_UNKNOWN : RA_IGNORED;
    return RA_UNKNOWN;
#undef IS
}

/* One event, in file order. Checks it and appends what the replay needs. */
static VrStatus on_event(Reader *r, RawAction ra, uint64_t addr, uint64_t size, uint64_t stream_v,
                         uint32_t line)
{
    Trace *t = r->t;
    VrStatus st;
    t->raw_events++;
    if (ra == RA_IGNORED)
        return VR_OK;
    uint32_t stream;
    if ((st = stream_index(r, stream_v, line, &stream)) != VR_OK)
        return st;
    bool seg_free = ra == RA_SEGMENT_FREE || ra == RA_SEGMENT_UNMAP;
    if (r->in_run && !seg_free) {
        if (ra == RA_SEGMENT_ALLOC || ra == RA_SEGMENT_MAP || ra == RA_OOM)
            t->ev[r->run_start].flags |= TRACE_RUN_BEFORE_NEW;
        r->in_run = false;
    }
    switch (ra) {
    case RA_ALLOC:
    case RA_FREE_REQUESTED:
    case RA_FREE_COMPLETED: {
        if (addr == 0 || addr % 512 != 0)
            return fail(r, line, "address %" PRIu64 " is not a nonzero multiple of 512 (PyTorch's "
                                 "blocks are)", addr);
        if (size == 0 || size > ALLOC_MAX_REQUEST)
            return fail(r, line, "size %" PRIu64 " out of range (1 .. %" PRIu64 ")", size,
                        (uint64_t)ALLOC_MAX_REQUEST);
        if (addr > UINT64_MAX - size - 512 || addr + size >= ((uint64_t)1 << 62))
            return fail(r, line, "address %" PRIu64 " + size %" PRIu64 " out of range", addr, size);
        AddrState *s = addr_state(r, addr);
        if (ra == RA_ALLOC) {
            if (s && (s->state == ST_LIVE || s->state == ST_PENDING))
                return fail(r, line, "alloc at %" PRIu64 ", which is still %s (line %" PRIu32 ")",
                            addr, state_name(s->state), s->line);
            if (!s && (st = addr_new(r, addr, &s)) != VR_OK)
                return st;
            *s = (AddrState){size, line, stream, ST_LIVE};
            t->n_alloc++;
            return push_event(r, TA_ALLOC, addr, size, stream, line);
        }
        if (!s) {
            /* freed before allocated: live before the trace began */
            if ((st = addr_new(r, addr, &s)) != VR_OK)
                return st;
            *s = (AddrState){size, line, stream, ST_LIVE};
            if ((st = push_pre(r, addr, size, stream, line)) != VR_OK)
                return st;
            if (ra == RA_FREE_COMPLETED) { /* its free_requested came before the trace */
                s->state = ST_FREED;
                t->n_free++;
                return push_event(r, TA_FREE, addr, size, stream, line);
            }
        }
        if (s->state == ST_FREED)
            return fail(r, line, "%s of %" PRIu64 ", which was already freed (line %" PRIu32 ")",
                        ra == RA_FREE_REQUESTED ? "free_requested" : "free_completed", addr,
                        s->line);
        if (size != s->size)
            return fail(r, line, "free of %" PRIu64 " with size %" PRIu64 ", but it was "
                                 "allocated with size %" PRIu64 " (line %" PRIu32 ")",
                        addr, size, s->size, s->line);
        if (stream != s->stream)
            return fail(r, line, "free of %" PRIu64 " on stream %" PRIu64 ", but it was "
                                 "allocated on stream %" PRIu64 " (line %" PRIu32 ")",
                        addr, stream_v, t->streams[s->stream], s->line);
        if (ra == RA_FREE_REQUESTED) {
            if (s->state == ST_PENDING)
                return fail(r, line, "second free_requested of %" PRIu64 " (first at line %" PRIu32
                                     ")", addr, s->line);
            s->state = ST_PENDING;
            s->line = line;
            return push_event(r, TA_FREE_REQUESTED, addr, size, stream, line);
        }
        if (s->state == ST_LIVE)
            return fail(r, line, "free_completed of %" PRIu64 " without free_requested "
                                 "(allocated at line %" PRIu32 ")", addr, s->line);
        s->state = ST_FREED;
        s->line = line;
        t->n_free++;
        if (t->n > 0 && t->ev[t->n - 1].action == TA_FREE_REQUESTED && t->ev[t->n - 1].addr == addr) {
            t->ev[t->n - 1].action = TA_FREE;
            return VR_OK;
        }
        return push_event(r, TA_FREE_COMPLETED, addr, size, stream, line);
    }
    case RA_SEGMENT_ALLOC:
    case RA_SEGMENT_MAP:
    case RA_SEGMENT_FREE:
    case RA_SEGMENT_UNMAP: {
        if (size == 0 || size > MAX_SEGMENT_BYTES)
            return fail(r, line, "segment size %" PRIu64 " out of range (1 .. 2^48)", size);
        t->has_segment_events = true;
        t->n_segment_events++;
        if (ra == RA_SEGMENT_ALLOC || ra == RA_SEGMENT_MAP) {
            if (ra == RA_SEGMENT_MAP)
                t->expandable_trace = true;
            if (grow((void **)&t->measured_segs, &t->capmeasured, t->nmeasured + 1,
                     sizeof *t->measured_segs) != VR_OK)
                return oom_msg(r);
            t->measured_segs[t->nmeasured++] = size;
            if (ra == RA_SEGMENT_ALLOC && (st = seg_seen(r, addr, size, stream, line, false,
                                                         false)) != VR_OK)
                return st;
            r->running += (int64_t)size;
            if (r->running > MAX_SEQ_SUM)
                return fail(r, line, "segments add up to more than 2^62 bytes");
            if (r->running > 0 && (uint64_t)r->running > t->measured_peak_reserved)
                t->measured_peak_reserved = (uint64_t)r->running;
            return push_event(r, ra == RA_SEGMENT_ALLOC ? TA_SEGMENT_ALLOC : TA_SEGMENT_MAP, addr,
                              size, stream, line);
        }
        if (ra == RA_SEGMENT_FREE &&
            (st = seg_seen(r, addr, size, stream, line, true, size == 2097152)) != VR_OK)
            return st;
        r->running -= (int64_t)size;
        if (r->running < -MAX_SEQ_SUM)
            return fail(r, line, "segments freed add up to more than 2^62 bytes");
        if ((st = push_event(r, ra == RA_SEGMENT_FREE ? TA_SEGMENT_FREE : TA_SEGMENT_UNMAP, addr,
                             size, stream, line)) != VR_OK)
            return st;
        if (!r->in_run) {
            r->in_run = true;
            r->run_start = t->n - 1;
            t->ev[t->n - 1].flags |= TRACE_RUN_START;
        }
        return VR_OK;
    }
    case RA_OOM:
        if (size == 0 || size > ALLOC_MAX_REQUEST)
            return fail(r, line, "oom size %" PRIu64 " out of range", size);
        t->n_oom++;
        return push_event(r, TA_OOM, addr, size, stream, line);
    default:
        return fail(r, line, "unknown action");
    }
}

/* ---- CSV ---- */

/* Strict unsigned decimal. Up to 19 digits cannot pass 2^64 (10^19 - 1 < 2^64), so only a 20th
 * digit is checked for overflow: the check divides, and a trace has millions of numbers. */
static bool num(const char *s, const char *e, uint64_t *out)
{
    if (s >= e || e - s > 20)
        return false;
    const char *safe = e - s > 19 ? s + 19 : e;
    uint64_t v = 0;
    for (; s < safe; s++) {
        unsigned d = (unsigned)(unsigned char)*s - '0';
        if (d > 9)
            return false;
        v = v * 10 + d;
    }
    for (; s < e; s++) {
        unsigned d = (unsigned)(unsigned char)*s - '0';
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

enum { COL_ACTION, COL_ADDR, COL_SIZE, COL_STREAM, COL_SEQ, COL_TIME, NCOLS };
static const char *const col_names[NCOLS] = {"action", "addr", "size", "stream", "seq", "time_us"};

/* The header line [p, le): finds the columns. */
static VrStatus csv_header(Reader *r, const char *p, const char *le)
{
    for (int i = 0; i < NCOLS; i++)
        r->col[i] = -1;
    int idx = 0;
    const char *f = p;
    for (;;) {
        const char *fe = memchr(f, ',', (size_t)(le - f));
        if (!fe)
            fe = le;
        const char *a = f, *b = fe;
        while (a < b && (*a == ' ' || *a == '"'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '"'))
            b--;
        for (int i = 0; i < NCOLS; i++)
            if ((size_t)(b - a) == strlen(col_names[i]) &&
                memcmp(a, col_names[i], (size_t)(b - a)) == 0) {
                if (r->col[i] >= 0)
                    return fail(r, 1, "column '%s' named twice in the header", col_names[i]);
                r->col[i] = idx;
            }
        if (idx++ > 1000)
            return fail(r, 1, "more than 1000 columns in the header");
        if (fe == le)
            break;
        f = fe + 1;
    }
    if (r->col[COL_ACTION] < 0 || r->col[COL_ADDR] < 0 || r->col[COL_SIZE] < 0)
        return fail(r, 1, "expected a CSV header naming the columns action, addr and size "
                          "(PyTorch trace: seq,time_us,action,addr,size,stream)");
    r->need = 0;
    for (int i = 0; i < NCOLS; i++)
        if (r->col[i] + 1 > r->need)
            r->need = r->col[i] + 1;
    for (int k = 0; k < NCOLS * 2; k++)
        r->field_col[k] = -1;
    for (int i = 0; i < NCOLS; i++)
        if (r->col[i] >= 0 && r->col[i] < NCOLS * 2)
            r->field_col[r->col[i]] = i;
    r->header_done = true;
    return VR_OK;
}

/* The decimal digits at the start of the 8 bytes at s (s[0] first), eight at a time: how many
 * of them lead (0 to 8), and their value in *out. Bytes past the digits are only looked at. */
static int digits8(const char *s, uint64_t *out)
{
    uint64_t w;
    memcpy(&w, s, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w); /* s[0] in the low byte */
#endif
    /* a byte is a digit when its high nibble is 3 and adding 6 keeps it 3 (0x30..0x39); a
     * carry out of a byte that is not a digit can spoil only the bytes after it */
    uint64_t hi = 0xF0F0F0F0F0F0F0F0ULL, three = 0x3030303030303030ULL;
    uint64_t not_digit = ((w & hi) ^ three) | (((w + 0x0606060606060606ULL) & hi) ^ three);
    int n = not_digit ? __builtin_ctzll(not_digit) / 8 : 8;
    if (n == 0) {
        *out = 0;
        return 0;
    }
    /* the n digits' values, moved to the last n places of eight (zeros before them) */
    uint64_t t = w - three;
    if (n < 8) t <<= 8 * (8 - n);
    t = (t * 10 + (t >> 8)) & 0x00FF00FF00FF00FFULL;
    t = (t * 100 + (t >> 16)) & 0x0000FFFF0000FFFFULL;
    t = (t * 10000 + (t >> 32)) & 0xFFFFFFFFULL;
    *out = t;
    return n;
}

/* One data line [p, le) (without its end of line), number r->lineno. One pass over its fields up
 * to the last one this reader needs, each number parsed as it is scanned (a trace has millions of
 * them); a line's faults are reported in the order a field count, then the action, then each
 * number column in col_names' order, is checked. */
static VrStatus csv_line(Reader *r, const char *p, const char *le, const char *end)
{
    uint32_t lineno = r->lineno;
    int need = r->need;
    const int *col = r->col;
    if (need > NCOLS * 2)
        return fail(r, lineno, "the columns this reader needs come after column %d", NCOLS * 2);
    const char *fs[NCOLS] = {0}, *fe[NCOLS] = {0}; /* each column's field */
    uint64_t v[NCOLS] = {0};
    bool bad[NCOLS] = {0};
    int nf = 0;
    const char *f = p;
    for (;;) {
        int c = r->field_col[nf];
        const char *q = f;
        if (c > COL_ACTION) {
            /* digits, eight at a time where the buffer has eight bytes left, accumulated
             * without an overflow check: a number of 20 digits is read again by num, which
             * checks it; the field ends at its first byte that is not a digit */
            static const uint64_t pow10[9] = {1, 10, 100, 1000, 10000, 100000, 1000000,
                                              10000000, 100000000};
            uint64_t x = 0;
            while (q + 8 <= end) {
                uint64_t d;
                int k = digits8(q, &d);
                x = x * pow10[k] + d;
                q += k;
                if (k < 8) break;
            }
            for (; q < le; q++) {
                unsigned d = (unsigned)(unsigned char)*q - '0';
                if (d > 9) break;
                x = x * 10 + d;
            }
            ptrdiff_t n = q - f;
            bool ends = q == le || *q == ',';
            while (q < le && *q != ',')
                q++;
            bad[c] = !ends || n == 0 || n > 20 || (n > 19 && !num(f, q, &x));
            v[c] = x;
        } else {
            while (q < le && *q != ',')
                q++;
        }
        if (c >= 0)
            fs[c] = f, fe[c] = q;
        nf++;
        if (q == le || nf >= need)
            break;
        f = q + 1;
    }
    if (nf < need)
        return fail(r, lineno, "expected at least %d comma-separated fields, found %d", need, nf);
    const char *as = fs[COL_ACTION], *ae = fe[COL_ACTION];
    RawAction ra = action_of(as, (size_t)(ae - as));
    if (ra == RA_UNKNOWN) {
        int n = (int)(ae - as);
        bool printable = n <= 40;
        for (int i = 0; i < n && printable; i++)
            printable = as[i] >= 32 && as[i] < 127;
        return printable ? fail(r, lineno, "unknown action '%.*s' (expected alloc, "
                                           "free_requested, free_completed, segment_alloc, "
                                           "segment_free, segment_map, segment_unmap, oom)", n, as)
                         : fail(r, lineno, "unknown or unreadable action");
    }
    for (int i = COL_ADDR; i < NCOLS; i++) {
        if (col[i] < 0 || !bad[i])
            continue;
        ptrdiff_t n = fe[i] - fs[i];
        return fail(r, lineno, "%s is not an unsigned integer below 2^64: '%.*s'",
                    col_names[i], (int)(n > 40 ? 40 : n), fs[i]);
    }
    if (col[COL_SEQ] >= 0) {
        if (r->have_seq && v[COL_SEQ] <= r->last_seq)
            return fail(r, lineno, "events out of order: seq %" PRIu64 " after seq %" PRIu64
                                   " (line %" PRIu32 ")", v[COL_SEQ], r->last_seq,
                        r->last_seq_line);
        r->have_seq = true;
        r->last_seq = v[COL_SEQ];
        r->last_seq_line = lineno;
    }
    return on_event(r, ra, v[COL_ADDR], v[COL_SIZE], v[COL_STREAM], lineno);
}

/* Feeds [data, data + len): every complete line is parsed; *used = bytes consumed (up to and
 * including the last end of line). With `final`, a line left without an end of line is an
 * error (a truncated trace). */
static VrStatus csv_feed(Reader *r, const char *data, size_t len, bool final, size_t *used)
{
    const char *p = data, *end = data + len;
    VrStatus st = VR_OK;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            break;
        const char *le = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
        if (!r->header_done) {
            r->lineno = 1;
            st = csv_header(r, p, le);
        } else {
            if (r->lineno == UINT32_MAX)
                return fail(r, r->lineno, "more than 2^32 lines");
            r->lineno++;
            if (le > p) /* blank lines are skipped */
                st = csv_line(r, p, le, end);
        }
        if (st != VR_OK)
            return st;
        p = eol + 1;
    }
    *used = (size_t)(p - data);
    if (final && p < end)
        return r->header_done ? fail(r, r->lineno + 1, "last line has no end of line (truncated "
                                                       "trace?)")
                              : fail(r, 1, "no end of line after the header (truncated trace?)");
    if (final && !r->header_done)
        return fail(r, 1, "empty file: expected a CSV header");
    return VR_OK;
}

static VrStatus parse_csv(Reader *r, const char *data, size_t len)
{
    size_t used;
    return csv_feed(r, data, len, true, &used);
}

/* ---- JSON (tools/snapshot_to_json.py) ---- */

static bool json_u64(const cJSON *o, const char *key, uint64_t *out, bool required)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!it) {
        *out = 0;
        return !required;
    }
    if (!cJSON_IsNumber(it))
        return false;
    double d = it->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(uint64_t)d)
        return false;
    *out = (uint64_t)d;
    return true;
}

/* A snapshot segment's place, for the check that no two overlap. */
typedef struct SegPlace {
    uint64_t addr, size; /* bytes */
    uint32_t index;      /* in "segments" */
} SegPlace;

static int cmp_place(const void *x, const void *y)
{
    const SegPlace *a = x, *b = y;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

static VrStatus parse_json(Reader *r, const char *data, size_t len)
{
    const char *pend = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(data, len, &pend, false);
    if (!root) {
        const char *ep = cJSON_GetErrorPtr();
        uint32_t line = 1;
        if (ep && ep >= data && ep <= data + len)
            for (const char *c = data; c < ep; c++)
                line += *c == '\n';
        r->t->json = false; /* name the line for a syntax error */
        VrStatus st = fail(r, line, "malformed JSON");
        r->t->json = true;
        return st;
    }
    SegPlace *places = NULL; /* the snapshot segments' places */
    size_t nplaces = 0, capplaces = 0;
    char jerr[300];
    VrStatus st = jsonin_check(data, len, root, pend, jerr, sizeof jerr);
    if (st != VR_OK) {
        st = st == VR_ENOMEM ? oom_msg(r) : fail(r, 0, "%s", jerr);
        goto out;
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(root, "device_traces");
    if (!cJSON_IsArray(dt)) {
        st = fail(r, 0, "expected an object with a \"device_traces\" array (the format of "
                        "tools/snapshot_to_json.py)");
        goto out;
    }
    const cJSON *trace = NULL;
    int ndev = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, dt)
    {
        if (!cJSON_IsArray(d)) {
            st = fail(r, 0, "device_traces must be a list of lists");
            goto out;
        }
        if (cJSON_GetArraySize(d) > 0) {
            ndev++;
            if (!trace)
                trace = d;
        }
    }
    if (ndev > 1) {
        st = fail(r, 0, "device_traces has events for %d devices; convert one device at a time "
                        "(snapshot_to_json.py --device N)", ndev);
        goto out;
    }
    uint32_t idx = 0;
    const cJSON *e;
    if (trace) {
        cJSON_ArrayForEach(e, trace)
        {
            if (idx == UINT32_MAX - 1) {
                st = fail(r, idx, "too many entries");
                goto out;
            }
            idx++;
            const cJSON *ac = cJSON_GetObjectItemCaseSensitive(e, "action");
            if (!cJSON_IsObject(e) || !cJSON_IsString(ac)) {
                st = fail(r, idx, "expected an object with a string \"action\"");
                goto out;
            }
            RawAction ra = action_of(ac->valuestring, strlen(ac->valuestring));
            if (ra == RA_UNKNOWN) {
                st = fail(r, idx, "unknown action '%.40s'", ac->valuestring);
                goto out;
            }
            uint64_t addr, size, stream;
            if (!json_u64(e, "addr", &addr, ra != RA_IGNORED) ||
                !json_u64(e, "size", &size, ra != RA_IGNORED) ||
                !json_u64(e, "stream", &stream, false)) {
                st = fail(r, idx, "addr, size and stream must be non-negative integers below 2^53");
                goto out;
            }
            if ((st = on_event(r, ra, addr, size, stream, idx)) != VR_OK)
                goto out;
        }
    }
    /* Blocks still allocated at the snapshot that the trace never mentions were live all along. */
    const cJSON *segs = cJSON_GetObjectItemCaseSensitive(root, "segments");
    if (segs && !cJSON_IsArray(segs)) {
        st = fail(r, 0, "\"segments\" must be a list");
        goto out;
    }
    const cJSON *sg;
    uint32_t sidx = 0;
    cJSON_ArrayForEach(sg, segs)
    {
        sidx++;
        uint64_t sstream, saddr, ssize;
        const cJSON *blocks = cJSON_GetObjectItemCaseSensitive(sg, "blocks");
        if (!cJSON_IsObject(sg) || !json_u64(sg, "stream", &sstream, false) ||
            !json_u64(sg, "address", &saddr, false) || !json_u64(sg, "total_size", &ssize, false) ||
            (blocks && !cJSON_IsArray(blocks))) {
            st = fail(r, 0, "segments[%" PRIu32 "] malformed", sidx - 1);
            goto out;
        }
        const cJSON *exp = cJSON_GetObjectItemCaseSensitive(sg, "is_expandable");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(sg, "segment_type");
        if (saddr && ssize && !cJSON_IsTrue(exp)) {
            bool small = cJSON_IsString(type) ? strcmp(type->valuestring, "small") == 0
                                              : ssize == 2097152;
            uint32_t sidx_stream;
            if ((st = stream_index(r, sstream, 0, &sidx_stream)) != VR_OK ||
                (st = seg_seen(r, saddr, ssize, sidx_stream, 0, true, small)) != VR_OK)
                goto out;
        }
        /* the snapshot's structure: a segment with blocks has a place, its blocks lie inside
         * it in address order without overlapping, and no two segments overlap (checked
         * below, sorted) */
        if (cJSON_GetArraySize(blocks) > 0 && (!saddr || !ssize)) {
            st = fail(r, 0, "segments[%" PRIu32 "] has blocks but no address or total_size", sidx - 1);
            goto out;
        }
        if (saddr && ssize) {
            if (ssize > MAX_SEGMENT_BYTES || saddr > UINT64_MAX - ssize) {
                st = fail(r, 0, "segments[%" PRIu32 "]: address or total_size out of range", sidx - 1);
                goto out;
            }
            if (nplaces == capplaces &&
                grow((void **)&places, &capplaces, nplaces + 1, sizeof *places) != VR_OK) {
                st = oom_msg(r);
                goto out;
            }
            places[nplaces++] = (SegPlace){saddr, ssize, sidx - 1};
        }
        uint64_t next_free = saddr; /* blocks come in address order from the segment's base */
        const cJSON *bl;
        cJSON_ArrayForEach(bl, blocks)
        {
            const cJSON *state = cJSON_GetObjectItemCaseSensitive(bl, "state");
            uint64_t baddr, bsize, breq;
            if (!cJSON_IsObject(bl) || !json_u64(bl, "address", &baddr, true) ||
                !json_u64(bl, "size", &bsize, true) || !json_u64(bl, "requested_size", &breq, false)) {
                st = fail(r, 0, "segments[%" PRIu32 "]: a block needs integer address and size",
                          sidx - 1);
                goto out;
            }
            if (baddr < next_free || baddr - saddr > ssize || bsize > ssize - (baddr - saddr)) {
                st = fail(r, 0, "segments[%" PRIu32 "]: the block at %" PRIu64 " (%" PRIu64
                          " bytes) lies outside its segment [%" PRIu64 ", +%" PRIu64 ") or "
                          "overlaps the block before it", sidx - 1, baddr, bsize, saddr, ssize);
                goto out;
            }
            next_free = baddr + bsize;
            if (!cJSON_IsString(state) || (strcmp(state->valuestring, "active_allocated") != 0 &&
                                           strcmp(state->valuestring, "active_pending_free") != 0))
                continue;
            if (baddr == 0 || baddr % 512 || bsize == 0 || bsize > ALLOC_MAX_REQUEST ||
                baddr >= ((uint64_t)1 << 62)) {
                st = fail(r, 0, "segments[%" PRIu32 "]: block address or size out of range", sidx - 1);
                goto out;
            }
            if (addr_state(r, baddr))
                continue; /* the trace already accounts for it */
            uint32_t stream;
            AddrState *s;
            if ((st = stream_index(r, sstream, 0, &stream)) != VR_OK ||
                (st = addr_new(r, baddr, &s)) != VR_OK)
                goto out;
            uint64_t size = breq ? breq : bsize;
            *s = (AddrState){size, 0, stream, ST_LIVE};
            if ((st = push_pre(r, baddr, size, stream, 0)) != VR_OK)
                goto out;
            if (bsize % 512 == 0 && bsize >= size)
                r->t->pre[r->t->npre - 1].bytes = bsize;
        }
    }
    if (nplaces > 1)
        qsort(places, nplaces, sizeof *places, cmp_place);
    for (size_t i = 1; i < nplaces; i++)
        if (places[i].addr - places[i - 1].addr < places[i - 1].size) {
            st = fail(r, 0, "segments[%" PRIu32 "] and segments[%" PRIu32 "] overlap",
                      places[i - 1].index, places[i].index);
            goto out;
        }
out:
    free(places);
    cJSON_Delete(root);
    return st;
}

/* ---- loading ---- */

static int cmp_pre(const void *x, const void *y)
{
    const TraceBlock *a = x, *b = y;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

static int cmp_preseg(const void *x, const void *y)
{
    const TraceSegment *a = x, *b = y;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

void trace_free(Trace *t)
{
    if (!t)
        return;
    free(t->name);
    free(t->ev);
    free(t->streams);
    free(t->pre);
    free(t->preseg);
    free(t->measured_segs);
    free(t);
}

/* Renumbers streams in order of their trace values, so the model orders pools as PyTorch does. */
static VrStatus renumber_streams(Trace *t)
{
    if (t->nstreams <= 1)
        return VR_OK;
    uint64_t *sorted = malloc(t->nstreams * sizeof *sorted);
    uint32_t *rank = malloc(t->nstreams * sizeof *rank);
    if (!sorted || !rank) {
        free(sorted);
        free(rank);
        return VR_ENOMEM;
    }
    memcpy(sorted, t->streams, t->nstreams * sizeof *sorted);
    qsort(sorted, t->nstreams, sizeof *sorted, cmp_u64);
    for (size_t i = 0; i < t->nstreams; i++) {
        size_t lo = 0, hi = t->nstreams;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (sorted[mid] < t->streams[i])
                lo = mid + 1;
            else
                hi = mid;
        }
        rank[i] = (uint32_t)lo;
    }
    for (size_t i = 0; i < t->n; i++)
        t->ev[i].stream = rank[t->ev[i].stream];
    for (size_t i = 0; i < t->npre; i++)
        t->pre[i].stream = rank[t->pre[i].stream];
    for (size_t i = 0; i < t->npreseg; i++)
        t->preseg[i].stream = rank[t->preseg[i].stream];
    memcpy(t->streams, sorted, t->nstreams * sizeof *sorted);
    free(sorted);
    free(rank);
    return VR_OK;
}

/* Starts a Reader on a new Trace named `name`. VR_ENOMEM leaves nothing allocated. */
static VrStatus reader_begin(Reader *r, const char *name, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (err && errlen)
        err[0] = 0;
    Trace *t = calloc(1, sizeof *t);
    if (!t)
        return VR_ENOMEM;
    t->name = strdup(name ? name : "trace");
    if (!t->name) {
        free(t);
        return VR_ENOMEM;
    }
    r->t = t;
    r->err = err;
    r->errlen = errlen;
    return VR_OK;
}

/* Finishes the Reader: on success *out owns the Trace, else it is freed. */
static VrStatus reader_end(Reader *r, VrStatus st, Trace **out)
{
    Trace *t = r->t;
    if (st == VR_OK && (st = renumber_streams(t)) != VR_OK)
        oom_msg(r);
    if (st == VR_OK && t->npre > 1)
        qsort(t->pre, t->npre, sizeof *t->pre, cmp_pre);
    if (st == VR_OK && t->npreseg > 1)
        qsort(t->preseg, t->npreseg, sizeof *t->preseg, cmp_preseg);
    u64map_free(&r->addrs);
    u64map_free(&r->segfirst);
    u64map_free(&r->streams);
    free(r->st);
    if (st != VR_OK) {
        trace_free(t);
        return st;
    }
    *out = t;
    return VR_OK;
}

static bool looks_json(const char *data, size_t len)
{
    size_t i = 0;
    while (i < len && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r'))
        i++;
    return i < len && data[i] == '{';
}

VrStatus trace_parse(const char *name, const char *data, size_t len, Trace **out, char *err,
                     size_t errlen)
{
    *out = NULL;
    Reader r;
    VrStatus st = reader_begin(&r, name, err, errlen);
    if (st != VR_OK)
        return st;
    if (len > MAX_TRACE_BYTES) {
        st = fail(&r, 0, "trace text larger than 1 GiB: refused");
    } else if (looks_json(data, len) && len > MAX_JSON_TRACE_BYTES) {
        st = fail(&r, 0, "JSON trace larger than 256 MiB: refused");
    } else if (looks_json(data, len)) {
        r.t->json = true;
        st = parse_json(&r, data, len);
    } else {
        st = parse_csv(&r, data, len);
    }
    return reader_end(&r, st, out);
}

#define CHUNK ((size_t)1 << 20)          /* bytes read at a time from a file */
#define MAX_LINE ((size_t)64 << 20)      /* longest CSV line accepted */

/* Where trace bytes come from: a gzip (or plain) file, or memory handed over in chunks. */
typedef struct Source {
    const char *name;     /* for messages */
    gzFile f;             /* file, or NULL for memory */
    const char *mem;      /* memory source */
    size_t memlen, mempos;
    size_t chunk;         /* bytes per read */
    uint64_t limit;       /* most bytes of text it may give (a gzip file's inflated text) */
} Source;

/* Reads up to src->chunk more bytes into buf[*n..], growing buf. Returns bytes read (0 at the
 * end) or -1 with err and *st set. */
static long read_more(Source *src, char **buf, size_t *n, size_t *cap, char *err, size_t errlen,
                      VrStatus *st)
{
    if (*cap - *n < src->chunk) {
        size_t ncap = *cap ? *cap : src->chunk;
        while (ncap - *n < src->chunk)
            ncap *= 2;
        char *nb = realloc(*buf, ncap);
        if (!nb) {
            snprintf(err, errlen, "%s: out of host memory", src->name);
            *st = VR_ENOMEM;
            return -1;
        }
        *buf = nb;
        *cap = ncap;
    }
    if (!src->f) {
        size_t k = src->memlen - src->mempos < src->chunk ? src->memlen - src->mempos : src->chunk;
        if (k)
            memcpy(*buf + *n, src->mem + src->mempos, k);
        src->mempos += k;
        *n += k;
        return (long)k;
    }
    int got = gzread(src->f, *buf + *n, (unsigned)src->chunk);
    int errnum = Z_OK;
    const char *msg = gzerror(src->f, &errnum);
    if (got < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
        snprintf(err, errlen, "%s: %s%s", src->name,
                 errnum == Z_BUF_ERROR ? "truncated gzip file: " : "cannot read: ", msg);
        *st = VR_EIO;
        return -1;
    }
    *n += (size_t)got;
    return got;
}

/* Reads a whole trace from src: JSON is read whole and parsed; CSV is parsed as it streams in,
 * keeping only the unfinished last line in memory. */
static VrStatus load_source(Source *src, Trace **out, char *err, size_t errlen)
{
    *out = NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    VrStatus st = VR_OK;
    long got;
    /* read until the first non-blank byte decides the format */
    for (;;) {
        got = read_more(src, &buf, &n, &cap, err, errlen, &st);
        if (got < 0)
            goto out;
        total += (uint64_t)got;
        size_t i = 0;
        while (i < n && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r'))
            i++;
        if (i < n || got == 0 || total > MAX_LINE)
            break;
    }
    if (looks_json(buf, n)) {
        while (got > 0 && (got = read_more(src, &buf, &n, &cap, err, errlen, &st)) > 0) {
            total += (uint64_t)got;
            if (total > MAX_JSON_TRACE_BYTES) {
                snprintf(err, errlen, "%s: JSON trace larger than 256 MiB: refused", src->name);
                st = VR_EINVAL;
                goto out;
            }
        }
        if (got < 0)
            goto out;
        st = trace_parse(src->name, buf, n, out, err, errlen);
        goto out;
    }
    Reader r;
    if ((st = reader_begin(&r, src->name, err, errlen)) != VR_OK) {
        snprintf(err, errlen, "%s: out of host memory", src->name);
        goto out;
    }
    for (;;) {
        size_t used = 0;
        bool final = got == 0;
        st = csv_feed(&r, buf, n, final, &used);
        if (st != VR_OK || final)
            break;
        memmove(buf, buf + used, n - used);
        n -= used;
        if (n > MAX_LINE) {
            st = fail(&r, r.lineno + 1, "line longer than 64 MiB");
            break;
        }
        if ((got = read_more(src, &buf, &n, &cap, err, errlen, &st)) < 0)
            break;
        total += (uint64_t)got;
        if (total > src->limit) {
            st = src->limit < MAX_TRACE_BYTES
                     ? fail(&r, 0, "inflates to more than %" PRIu64 " MiB of text (%d times its "
                                   "compressed size): refused, a gzip bomb?",
                            src->limit >> 20, TEXT_RATIO_MAX)
                     : fail(&r, 0, "trace text larger than 1 GiB: refused");
            break;
        }
    }
    st = reader_end(&r, st, out);
out:
    free(buf);
    return st;
}

/* A gzip file at most this large (compressed) is inflated whole by libdeflate, about 3 times faster
 * than zlib's stream (the largest trace here: 9 ms against 26); larger ones, plain
 * text and anything libdeflate refuses stream through zlib, whose messages name the fault. */
#define WHOLE_GZIP_MAX ((size_t)256 << 20)
/* ... and only while its text fits in this much memory */
#define WHOLE_TEXT_MAX ((size_t)256 << 20)

/* What inflate_whole did. */
typedef enum Whole { WHOLE_OK, WHOLE_NA, WHOLE_TOOBIG } Whole;

/* Reads the gzip file open at fd (size bytes) whole and inflates it (every member) into *text
 * (*len bytes, the caller frees it), never holding more than limit bytes of text
 * (WHOLE_TOOBIG when it inflates past that) nor more than WHOLE_TEXT_MAX (WHOLE_NA: then the
 * stream reads it, a line at a time, counting its text against the limit as it inflates).
 * WHOLE_NA, with nothing allocated and fd rewound, wherever this path does not apply. */
static Whole inflate_whole(int fd, uint64_t size, uint64_t limit, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    unsigned char *in = NULL, *out = NULL;
    struct libdeflate_decompressor *d = NULL;
    Whole w = WHOLE_NA;
    size_t most = limit < WHOLE_TEXT_MAX ? (size_t)limit : WHOLE_TEXT_MAX;
    size_t n = (size_t)size;
    if (size < 18 || size > WHOLE_GZIP_MAX)
        goto out;
    in = malloc(n);
    if (!in || !vr_read_all(fd, in, n) || in[0] != 0x1f || in[1] != 0x8b)
        goto out;
    /* each member's trailer gives its size mod 2^32; one member's (the usual case) sizes the
     * buffer, which grows where a member needs more, up to WHOLE_TEXT_MAX */
    size_t cap = (size_t)in[n - 4] | (size_t)in[n - 3] << 8 | (size_t)in[n - 2] << 16 |
                 (size_t)in[n - 1] << 24;
    if (cap < 1 << 16)
        cap = 1 << 16;
    if (cap > most)
        cap = most;
    d = libdeflate_alloc_decompressor();
    if (!d || !(out = malloc(cap)))
        goto out;
    size_t pos = 0, used = 0;
    while (pos < n) {
        size_t in_used = 0, got = 0;
        enum libdeflate_result r = libdeflate_gzip_decompress_ex(d, in + pos, n - pos,
                                                                 out + used, cap - used, &in_used, &got);
        if (r == LIBDEFLATE_INSUFFICIENT_SPACE) {
            if (cap >= most) {
                if (most == limit)
                    w = WHOLE_TOOBIG;
                goto out;
            }
            size_t nc = cap * 2 > most ? most : cap * 2;
            unsigned char *nb = realloc(out, nc);
            if (!nb)
                goto out;
            out = nb;
            cap = nc;
            continue;
        }
        if (r != LIBDEFLATE_SUCCESS)
            goto out;
        pos += in_used;
        used += got;
    }
    w = WHOLE_OK;
    *text = (char *)out;
    *len = used;
    out = NULL;
out:
    if (d)
        libdeflate_free_decompressor(d);
    free(in);
    free(out);
    if (w == WHOLE_NA)
        lseek(fd, 0, SEEK_SET);
    return w;
}

VrStatus trace_load(const char *path, Trace **out, char *err, size_t errlen)
{
    *out = NULL;
    /* opened the one checked way (infile.h): a FIFO or a device is refused, not waited on */
    int fd;
    uint64_t size;
    InfileStatus is = infile_open(path, MAX_TRACE_BYTES, &fd, &size);
    if (is != INFILE_OK) {
        if (is == INFILE_TOOBIG)
            snprintf(err, errlen, "%s: larger than 1 GiB: refused", path);
        else
            snprintf(err, errlen, "%s: %s", path, infile_reason(is));
        return is == INFILE_MISSING || is == INFILE_IO ? VR_EIO
               : is == INFILE_NOMEM                    ? VR_ENOMEM
                                                       : VR_EINVAL;
    }
    char *text;
    size_t len;
    /* a gzip file's text is limited while it inflates (the limit applies to plain text too,
     * which is never larger than the file) */
    uint64_t limit = size > MAX_TRACE_BYTES / TEXT_RATIO_MAX ? MAX_TRACE_BYTES : size * TEXT_RATIO_MAX;
    if (limit < MIN_TEXT_LIMIT)
        limit = MIN_TEXT_LIMIT;
    Whole w = inflate_whole(fd, size, limit, &text, &len);
    if (w == WHOLE_TOOBIG) {
        close(fd);
        snprintf(err, errlen, "%s: inflates to more than %" PRIu64 " MiB of text (%d times its "
                 "compressed size): refused, a gzip bomb?", path, limit >> 20, TEXT_RATIO_MAX);
        return VR_EINVAL;
    }
    if (w == WHOLE_OK) {
        close(fd);
        VrStatus st = trace_parse(path, text, len, out, err, errlen);
        free(text);
        return st;
    }
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        snprintf(err, errlen, "%s: cannot open", path);
        return VR_EIO;
    }
    gzbuffer(f, 1 << 17);
    Source src = {path, f, NULL, 0, 0, CHUNK, limit};
    VrStatus st = load_source(&src, out, err, errlen);
    gzclose(f);
    return st;
}

VrStatus trace_parse_chunked(const char *name, const char *data, size_t len, size_t chunk,
                             Trace **out, char *err, size_t errlen)
{
    if (chunk == 0)
        chunk = 1;
    Source src = {name ? name : "trace", NULL, data, len, 0, chunk, MAX_TRACE_BYTES};
    return load_source(&src, out, err, errlen);
}

/* ---- replay ---- */

typedef struct SegLog {
    uint64_t *v;
    size_t n, cap;
    bool failed; /* host memory ran out */
} SegLog;

static void on_alloc_event(void *ud, AllocEventKind kind, uint64_t addr, uint64_t size, int stream)
{
    (void)addr;
    (void)stream;
    SegLog *l = ud;
    if (kind != ALLOC_EV_SEGMENT_ALLOC && kind != ALLOC_EV_SEGMENT_MAP)
        return;
    if (grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v) != VR_OK) {
        l->failed = true;
        return;
    }
    l->v[l->n++] = size;
}

void replay_result_clear(ReplayResult *res)
{
    free(res->segs);
    free(res->map);
    memset(res, 0, sizeof *res);
}

static VrStatus rfail(const Trace *t, uint32_t line, char *err, size_t errlen, const char *what)
{
    if (err && errlen) {
        if (line == 0) /* a snapshot's segment or block */
            snprintf(err, errlen, "%s: snapshot: %s", t->name, what);
        else
            snprintf(err, errlen, t->json ? "%s: entry %" PRIu32 ": %s" : "%s:%" PRIu32 ": %s",
                     t->name, line, what);
    }
    return VR_EINVAL;
}

VrStatus replay_run(const Trace *t, const AllocConfig *cfg, ReplayResult *res, char *err,
                    size_t errlen)
{
    return replay_run_checked(t, cfg, 0, res, err, errlen);
}

VrStatus replay_run_checked(const Trace *t, const AllocConfig *cfg, size_t check_every,
                            ReplayResult *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    if (err && errlen)
        err[0] = 0;
    Alloc *a = NULL;
    VrStatus st = alloc_new(cfg, &a);
    if (st != VR_OK) {
        if (err && errlen)
            snprintf(err, errlen, "cannot make the allocator: %s", vr_status_str(st));
        return st;
    }
    SegLog log = {0};
    alloc_set_listener(a, on_alloc_event, &log);
    /* The model usually puts every block at the trace's address; amap keeps only the trace
     * addresses whose block is elsewhere, and those of pending frees: trace address -> slot of
     * maddr. A trace address without an entry is its own model address. */
    U64Map amap = {0};
    uint64_t *maddr = NULL;  /* model address per slot (0: a synchronize completed the free) */
    size_t nm = 0, capm = 0;
    uint32_t *freeslots = NULL;
    size_t nfree = 0, capfree = 0;
    U64Map pend = {0};       /* trace addresses freed with TA_FREE_REQUESTED, not completed */
    char msg[512];

#define SLOT_NEW(out_idx)                                                                          \
    do {                                                                                           \
        if (nfree) {                                                                               \
            out_idx = freeslots[--nfree];                                                          \
        } else {                                                                                   \
            if (grow((void **)&maddr, &capm, nm + 1, sizeof *maddr) != VR_OK)                      \
                goto enomem;                                                                       \
            out_idx = (uint32_t)nm++;                                                              \
        }                                                                                          \
    } while (0)
#define SLOT_FREE(idx)                                                                             \
    do {                                                                                           \
        if (grow((void **)&freeslots, &capfree, nfree + 1, sizeof *freeslots) != VR_OK)            \
            goto enomem;                                                                           \
        freeslots[nfree++] = idx;                                                                  \
    } while (0)

    /* the segments and blocks there were before the trace began */
    for (size_t i = 0; i < t->npreseg; i++) {
        const TraceSegment *sg = &t->preseg[i];
        st = alloc_inject_segment(a, sg->addr, sg->size, (int)sg->stream, sg->small);
        if (st == VR_ENOMEM)
            goto enomem;
        if (st != VR_OK) {
            snprintf(msg, sizeof msg, "segment %" PRIu64 " (%" PRIu64 " bytes), there before the "
                                      "trace began, %s", sg->addr, sg->size,
                     st == VR_OOM ? "exceeds the capacity" : "overlaps another one");
            st = rfail(t, sg->line, err, errlen, msg);
            goto out;
        }
    }
    for (size_t i = 0; i < t->npre; i++) {
        const TraceBlock *b = &t->pre[i];
        st = alloc_inject_block(a, b->addr, b->size, b->bytes, (int)b->stream);
        if (st == VR_ENOMEM)
            goto enomem;
        if (st == VR_OOM) {
            snprintf(msg, sizeof msg, "the blocks live before the trace began already exceed the "
                                      "capacity (%" PRIu64 " bytes)", cfg->capacity);
            st = rfail(t, b->line, err, errlen, msg);
            goto out;
        }
        if (st != VR_OK) {
            snprintf(msg, sizeof msg, "block %" PRIu64 " (%" PRIu64 " bytes), live before the trace "
                                      "began, overlaps another such block or a segment of another "
                                      "pool", b->addr, b->size);
            st = rfail(t, b->line, err, errlen, msg);
            goto out;
        }
        res->injected_blocks++;
        res->injected_bytes += alloc_block_size(a, b->addr);
    }

    if (t->live_before) {
        /* one block far below where CUDA places memory, in a segment of its own */
        const uint64_t where = (uint64_t)1 << 40;
        st = alloc_inject(a, where, t->live_before, 0);
        if (st == VR_ENOMEM)
            goto enomem;
        if (st != VR_OK) {
            if (err && errlen)
                snprintf(err, errlen, "%s: the %" PRIu64 " bytes live before the trace %s",
                         t->name, t->live_before,
                         st == VR_OOM ? "exceed the capacity" : "cannot be placed");
            st = VR_EINVAL;
            goto out;
        }
        res->injected_blocks++;
        res->injected_bytes += alloc_block_size(a, where);
    }
    uint64_t peak_seen = alloc_reserved_bytes(a);
    res->allocated_at_peak_reserved = alloc_allocated_bytes(a);
    uint64_t retries = 0;
    bool synced = false;
    size_t i;
    for (i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        switch ((TraceAction)e->action) {
        case TA_ALLOC: {
            uint64_t m;
            st = alloc_malloc(a, e->size, (int)e->stream, t->no_hints ? 0 : e->addr, &m);
            if (st == VR_OOM) {
                res->oom = true;
                res->oom_line = e->line;
                alloc_last_oom(a, &res->oom_info);
                st = VR_OK;
                goto done;
            }
            if (st == VR_ENOMEM)
                goto enomem;
            if (st != VR_OK) {
                st = rfail(t, e->line, err, errlen, "the allocator refused this alloc");
                goto out;
            }
            if (m != e->addr) {
                if (res->address_mismatches++ == 0)
                    res->first_address_mismatch_line = e->line;
                uint32_t idx;
                SLOT_NEW(idx);
                maddr[idx] = m;
                if (u64map_put(&amap, e->addr, idx) != VR_OK)
                    goto enomem;
            }
            uint64_t r = alloc_reserved_bytes(a), al = alloc_allocated_bytes(a);
            if (r > peak_seen) {
                peak_seen = r;
                res->allocated_at_peak_reserved = al;
            } else if (r == peak_seen && al > res->allocated_at_peak_reserved) {
                res->allocated_at_peak_reserved = al;
            }
            break;
        }
        case TA_FREE:
        case TA_FREE_REQUESTED:
        case TA_FREE_COMPLETED: {
            uint64_t slot;
            bool mapped = u64map_get(&amap, e->addr, &slot);
            if (!mapped && e->action == TA_FREE_COMPLETED)
                break; /* not pending in the model: nothing to complete */
            uint32_t idx = mapped ? (uint32_t)slot : UINT32_MAX;
            uint64_t m = mapped ? maddr[idx] : e->addr;
            if (e->action == TA_FREE_REQUESTED) {
                st = alloc_free_deferred(a, m);
                if (st == VR_OK) {
                    if (!mapped) { /* pending frees always get a slot, for the synchronize below */
                        SLOT_NEW(idx);
                        maddr[idx] = m;
                        if (u64map_put(&amap, e->addr, idx) != VR_OK)
                            goto enomem;
                    }
                    if (u64map_put(&pend, e->addr, idx) != VR_OK)
                        goto enomem;
                }
            } else if (e->action == TA_FREE) {
                st = alloc_dealloc(a, m);
                if (mapped) {
                    u64map_del(&amap, e->addr);
                    SLOT_FREE(idx);
                }
            } else {
                /* m == 0: a synchronize of the model (empty_cache, OOM retry) completed it */
                st = m ? alloc_free_complete(a, m) : VR_OK;
                u64map_del(&amap, e->addr);
                u64map_del(&pend, e->addr);
                SLOT_FREE(idx);
            }
            if (st == VR_ENOMEM)
                goto enomem;
            if (st != VR_OK) {
                st = rfail(t, e->line, err, errlen, "the allocator refused this free");
                goto out;
            }
            break;
        }
        case TA_SEGMENT_FREE:
        case TA_SEGMENT_UNMAP:
            /* A run of segment frees is empty_cache() unless, with a capacity to model, it is the
             * allocator's own release before a new segment or an OOM (then the model decides). */
            if ((e->flags & TRACE_RUN_START) &&
                !(cfg->capacity && (e->flags & TRACE_RUN_BEFORE_NEW))) {
                alloc_empty_cache(a);
                res->empty_cache_calls++;
                synced = true;
            }
            break;
        case TA_OOM:
            res->measured_ooms++;
            if (cfg->capacity) { /* PyTorch failed this request: so should the model */
                uint64_t m;
                st = alloc_malloc(a, e->size, (int)e->stream, 0, &m);
                if (st == VR_OK)
                    st = alloc_dealloc(a, m);
                if (st == VR_ENOMEM)
                    goto enomem;
                st = VR_OK;
            }
            break;
        default:
            break;
        }
        if (check_every && (i % check_every == 0 || i + 1 == t->n) && alloc_check(a) != VR_OK) {
            st = rfail(t, e->line, err, errlen, "allocator invariant broken after this event");
            goto out;
        }
        if (e->action == TA_ALLOC || e->action == TA_OOM) {
            /* a retry inside alloc_malloc synchronizes: pending frees are complete */
            uint64_t nr = alloc_num_alloc_retries(a);
            if (nr != retries) {
                retries = nr;
                synced = u64map_count(&pend) > 0;
            }
        }
        if (synced) {
            uint64_t pidx;
            for (size_t pos = 0; u64map_next(&pend, &pos, NULL, &pidx);)
                maddr[pidx] = 0;
            u64map_clear(&pend);
            synced = false;
        }
    }
done:
    res->events_replayed = i;
    if (log.failed)
        goto enomem;
    res->events = t->raw_events;
    alloc_stats(a, &res->stats);
    res->peak_allocated = res->stats.allocated_peak;
    res->peak_reserved = res->stats.reserved_peak;
    res->fragmentation_at_peak =
        peak_seen ? 1.0 - (double)res->allocated_at_peak_reserved / (double)peak_seen : 0.0;
    res->segment_allocs = res->stats.num_segment_allocs;
    res->num_alloc_retries = res->stats.num_alloc_retries;
    res->num_ooms = res->stats.num_ooms;
    res->has_measured = t->has_segment_events;
    res->measured_peak_reserved = t->measured_peak_reserved;
    res->measured_segment_allocs = t->nmeasured;
    res->segs = log.v;
    res->nsegs = log.n;
    log.v = NULL;
    res->segments_match = res->nsegs == t->nmeasured;
    res->first_segment_mismatch = res->nsegs < t->nmeasured ? res->nsegs : t->nmeasured;
    for (size_t k = 0; k < res->nsegs && k < t->nmeasured; k++)
        if (res->segs[k] != t->measured_segs[k]) {
            res->segments_match = false;
            res->first_segment_mismatch = k;
            break;
        }
    st = VR_OK;
    if (t->want_map && alloc_segment_map(a, &res->map, &res->nmap) != VR_OK)
        goto enomem;
    goto out;
enomem:
    st = VR_ENOMEM;
    if (err && errlen)
        snprintf(err, errlen, "%s: out of host memory during replay", t->name);
out:
#undef SLOT_NEW
#undef SLOT_FREE
    free(log.v);
    free(maddr);
    free(freeslots);
    u64map_free(&pend);
    u64map_free(&amap);
    alloc_free(a);
    if (st != VR_OK) {
        free(res->segs);
        res->segs = NULL;
        res->nsegs = 0;
        free(res->map);
        res->map = NULL;
        res->nmap = 0;
    }
    return st;
}
