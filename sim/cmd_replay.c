/* cmd_replay.c: `vrsim replay TRACE [options]`: replays a real PyTorch allocator trace through
 * the caching-allocator model and prints what it reserved next to what PyTorch did. The reading
 * and replaying live in replay.c; this file is the command line and the output only. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "cmds.h"
#include "replay.h"
#include "vr.h"

static void replay_usage(FILE *f)
{
    fprintf(f,
        "usage: vrsim replay TRACE [--alloc-conf STR] [--capacity SIZE] [--live-before SIZE]\n"
        "                          [--no-addresses] [--ideal] [--json] [--segments]\n"
        "                          [--upto LINE] [--map]\n"
        "\n"
        "Replays a PyTorch CUDA caching-allocator trace through vrsim's model of the allocator,\n"
        "deciding from the trace's alloc and free events alone, and prints peak allocated and\n"
        "reserved memory, the segments the allocator would cudaMalloc, retries, OOMs and the\n"
        "fragmentation at peak. Where the trace also recorded segment events (a trace recorded from\n"
        "process start), PyTorch's own figures are printed beside the model's: replaying with the\n"
        "trace's own settings should give the same segments and the same peak reserved, to the byte.\n"
        "\n"
        "TRACE is one of\n"
        "  *.csv or *.csv.gz   columns seq,time_us,action,addr,size,stream (a header line names them;\n"
        "                      only action, addr and size are required)\n"
        "  *.json              written by tools/snapshot_to_json.py from a pickled\n"
        "                      torch.cuda.memory._snapshot()\n"
        "Record one with:\n"
        "  torch.cuda.memory._record_memory_history(max_entries=10_000_000)\n"
        "  ... run the steps ...\n"
        "  torch.cuda.memory._dump_snapshot(\"snap.pickle\")\n"
        "  python3 tools/snapshot_to_json.py snap.pickle -o trace.json\n"
        "A trace that starts mid-run (a ring buffer that overflowed, recording started late) is\n"
        "fine: blocks and segments it frees before allocating them are taken to be there before\n"
        "it began, and a snapshot also supplies the segments and blocks it never touches.\n"
        "\n"
        "What-if options (the question to ask before setting PYTORCH_CUDA_ALLOC_CONF):\n"
        "  --alloc-conf STR   PYTORCH_CUDA_ALLOC_CONF to replay under, e.g.\n"
        "                     expandable_segments:True  max_split_size_mb:128\n"
        "                     roundup_power2_divisions:4  garbage_collection_threshold:0.8\n"
        "  --capacity SIZE    cap reserved memory as torch.cuda.set_per_process_memory_fraction\n"
        "                     does (SIZE in bytes, or with KiB, MiB, GiB, TiB: 10600MiB, 80GiB);\n"
        "                     the allocator frees its cache and retries before it gives up, and\n"
        "                     the replay stops at the first alloc that would raise OutOfMemoryError\n"
        "  --live-before SIZE memory allocated before a mid-run trace began that it never frees\n"
        "                     (weights, optimizer state: torch.cuda.memory_allocated() when\n"
        "                     recording started), placed first as one block\n"
        "  --no-addresses     ignore the trace's addresses: place each new segment below the\n"
        "                     earlier ones, as a simulation does (how close that comes)\n"
        "  --ideal            an allocator with no caching and no fragmentation (reserved ==\n"
        "                     allocated), to see how much of the peak is allocator slack\n"
        "Output:\n"
        "  --json             one JSON object on stdout (keys: events, peak_allocated_bytes,\n"
        "                     peak_reserved_bytes, segment_allocs, num_alloc_retries, num_ooms,\n"
        "                     measured_peak_reserved_bytes, segments_match, ...)\n"
        "  --segments         list the replayed and measured segment sizes side by side\n"
        "  --upto LINE        replay the trace only up to line LINE (entry LINE of a JSON trace):\n"
        "                     the allocator as it stood at that moment (measured figures, which\n"
        "                     are the whole trace's, are not compared)\n"
        "  --map              list every segment and its blocks (offset, size, allocated or free)\n"
        "                     as the replay ends: where a difference in fragmentation comes from\n"
        "                     (with --json: a \"map\" array of {segment, offset, bytes, allocated})\n"
        "\n"
        "Examples:\n"
        "  vrsim replay validation/traces/fulltrace_pub-c04.csv.gz\n"
        "  vrsim replay validation/traces/fulltrace_pub-c05.csv.gz --capacity 10600MiB\n"
        "  vrsim replay validation/traces/fulltrace_pub-c13.csv.gz --alloc-conf expandable_segments:True\n"
        "\n"
        "Exit status: 0 replayed (and it fits), 3 the model ran out of memory under --capacity,\n"
        "2 bad input or usage (the message names FILE:LINE), 1 internal error.\n");
}

/* Parses "123", "10600MiB", "80GiB", "1.5GiB" into bytes. */
static bool parse_capacity(const char *s, uint64_t *out)
{
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || errno || !(v > 0) || v != v)
        return false;
    double mul = 1;
    if (*end == 0 || strcmp(end, "B") == 0)
        mul = 1;
    else if (strcmp(end, "KiB") == 0 || strcmp(end, "K") == 0)
        mul = 1024.0;
    else if (strcmp(end, "MiB") == 0 || strcmp(end, "M") == 0)
        mul = 1048576.0;
    else if (strcmp(end, "GiB") == 0 || strcmp(end, "G") == 0)
        mul = 1073741824.0;
    else if (strcmp(end, "TiB") == 0 || strcmp(end, "T") == 0)
        mul = 1099511627776.0;
    else
        return false;
    double b = floor(v * mul);
    if (b < 1 || b > 1.8e19)
        return false;
    *out = (uint64_t)b;
    return true;
}

/* 1234567 -> "1,234,567" */
static const char *commas(uint64_t v, char *buf, size_t len)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v);
    size_t o = 0;
    for (int i = 0; i < n && o + 2 < len; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = 0;
    return buf;
}

static const char *mib(uint64_t b, char *buf, size_t len)
{
    snprintf(buf, len, "%.2f MiB", (double)b / 1048576.0);
    return buf;
}

static void print_text(const char *path, const Trace *t, const AllocConfig *cfg, const char *conf,
                       const ReplayResult *r, bool list_segments)
{
    char a[48], b[48], c[48], d[48], e[48];
    printf("trace        %s\n", path);
    printf("events       %s (%s allocs, %s frees, %s segment events, %s ooms)\n",
           commas(r->events, a, sizeof a), commas(t->n_alloc, b, sizeof b),
           commas(t->n_free, c, sizeof c), commas(t->n_segment_events, d, sizeof d),
           commas(t->n_oom, e, sizeof e));
    printf("allocator    %s, PYTORCH_CUDA_ALLOC_CONF=%s, capacity %s\n",
           cfg->kind == ALLOC_IDEAL ? "ideal (no caching)" : "caching", conf[0] ? conf : "(default)",
           cfg->capacity ? mib(cfg->capacity, a, sizeof a) : "unlimited");
    if (r->injected_blocks)
        printf("mid-run      %s blocks (%s) live before the trace began were placed first\n",
               commas(r->injected_blocks, a, sizeof a), mib(r->injected_bytes, b, sizeof b));
    else if (!t->has_segment_events)
        printf("note         no segment events: if the trace started mid-run, memory allocated before\n"
               "             it and never freed is missing (see --live-before)\n");
    printf("\n%-24s %-34s %s\n", "", "replayed", r->has_measured ? "measured (trace)" : "");
    printf("%-24s %s B (%s)\n", "peak allocated", commas(r->peak_allocated, a, sizeof a),
           mib(r->peak_allocated, b, sizeof b));
    char rep[96];
    snprintf(rep, sizeof rep, "%s B (%s)", commas(r->peak_reserved, a, sizeof a),
             mib(r->peak_reserved, b, sizeof b));
    if (r->has_measured)
        printf("%-24s %-34s %s B  %s\n", "peak reserved", rep,
               commas(r->measured_peak_reserved, c, sizeof c),
               r->measured_peak_reserved == r->peak_reserved ? "same" : "DIFFERENT");
    else
        printf("%-24s %s\n", "peak reserved", rep);
    snprintf(rep, sizeof rep, "%" PRIu64, r->segment_allocs);
    if (r->has_measured) {
        char why[96];
        if (r->segments_match)
            snprintf(why, sizeof why, "same sizes, same order");
        else if (r->first_segment_mismatch < r->nsegs &&
                 r->first_segment_mismatch < r->measured_segment_allocs)
            snprintf(why, sizeof why, "DIFFERENT from segment #%zu on",
                     r->first_segment_mismatch + 1);
        else
            snprintf(why, sizeof why, "DIFFERENT count");
        printf("%-24s %-34s %-18" PRIu64 " %s\n",
               cfg->expandable_segments ? "segment maps" : "segment allocations", rep,
               r->measured_segment_allocs, why);
    } else {
        printf("%-24s %s\n", cfg->expandable_segments ? "segment maps" : "segment allocations", rep);
    }
    printf("%-24s %" PRIu64 "\n", "num_alloc_retries", r->num_alloc_retries);
    if (r->has_measured || r->measured_ooms)
        printf("%-24s %-34" PRIu64 " %" PRIu64 "\n", "num_ooms", r->num_ooms, r->measured_ooms);
    else
        printf("%-24s %" PRIu64 "\n", "num_ooms", r->num_ooms);
    printf("%-24s %.2f%% (%s of the peak reservation never in use at once)\n",
           "fragmentation at peak", 100.0 * r->fragmentation_at_peak,
           mib(r->peak_reserved - r->allocated_at_peak_reserved, a, sizeof a));
    printf("%-24s %s allocated, %s reserved, largest free block %s\n", "at the end",
           mib(r->stats.allocated, a, sizeof a), mib(r->stats.reserved, b, sizeof b),
           mib(r->stats.largest_free_block, c, sizeof c));
    if (r->empty_cache_calls)
        printf("%-24s %" PRIu64 " (runs of segment_free in the trace)\n", "empty_cache calls",
               r->empty_cache_calls);
    if (r->has_measured && !r->address_mismatches)
        printf("%-24s every alloc landed at the trace's address\n", "addresses");
    else if (r->has_measured)
        printf("%-24s %" PRIu64 " allocs landed elsewhere than in the trace (first at line %" PRIu32
               ")\n", "addresses", r->address_mismatches, r->first_address_mismatch_line);
    if (r->oom) {
        char msg[512];
        alloc_format_oom(&r->oom_info, cfg->fraction_set, msg, sizeof msg);
        printf("\nOUT OF MEMORY at %s%s%" PRIu32 ": %s\nThe replay stopped there.\n", path,
               t->json ? ": entry " : ":", r->oom_line, msg);
    }
    if (list_segments) {
        printf("\n%6s %18s %18s\n", "#", "replayed", "measured");
        size_t n = r->nsegs > t->nmeasured ? r->nsegs : t->nmeasured;
        for (size_t i = 0; i < n; i++) {
            char x[32] = "-", y[32] = "-";
            if (i < r->nsegs)
                commas(r->segs[i], x, sizeof x);
            if (i < t->nmeasured)
                commas(t->measured_segs[i], y, sizeof y);
            printf("%6zu %18s %18s%s\n", i + 1, x, y,
                   i < r->nsegs && i < t->nmeasured && r->segs[i] == t->measured_segs[i] ? ""
                                                                                      : "  <-");
        }
    }
}

static int print_json(const char *path, const Trace *t, const AllocConfig *cfg, const char *conf,
                      const ReplayResult *r)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return VR_EXIT_INTERNAL;
    cJSON_AddStringToObject(o, "trace", path);
    cJSON_AddNumberToObject(o, "events", (double)r->events);
    cJSON_AddStringToObject(o, "allocator", cfg->kind == ALLOC_IDEAL ? "ideal" : "caching");
    cJSON_AddStringToObject(o, "alloc_conf", conf);
    if (cfg->capacity)
        cJSON_AddNumberToObject(o, "capacity_bytes", (double)cfg->capacity);
    else
        cJSON_AddNullToObject(o, "capacity_bytes");
    cJSON_AddBoolToObject(o, "fits", !r->oom);
    cJSON_AddNumberToObject(o, "peak_allocated_bytes", (double)r->peak_allocated);
    cJSON_AddNumberToObject(o, "peak_reserved_bytes", (double)r->peak_reserved);
    cJSON_AddNumberToObject(o, "segment_allocs", (double)r->segment_allocs);
    cJSON_AddNumberToObject(o, "num_alloc_retries", (double)r->num_alloc_retries);
    cJSON_AddNumberToObject(o, "num_ooms", (double)r->num_ooms);
    cJSON_AddNumberToObject(o, "fragmentation_at_peak", r->fragmentation_at_peak);
    cJSON_AddNumberToObject(o, "allocated_at_peak_reserved_bytes",
                            (double)r->allocated_at_peak_reserved);
    cJSON_AddNumberToObject(o, "final_allocated_bytes", (double)r->stats.allocated);
    cJSON_AddNumberToObject(o, "final_reserved_bytes", (double)r->stats.reserved);
    cJSON_AddNumberToObject(o, "largest_free_block_bytes", (double)r->stats.largest_free_block);
    cJSON_AddNumberToObject(o, "inactive_split_bytes", (double)r->stats.inactive_split);
    cJSON_AddNumberToObject(o, "empty_cache_calls", (double)r->empty_cache_calls);
    cJSON_AddNumberToObject(o, "injected_blocks", (double)r->injected_blocks);
    cJSON_AddNumberToObject(o, "injected_bytes", (double)r->injected_bytes);
    cJSON_AddNumberToObject(o, "allocs", (double)t->n_alloc);
    cJSON_AddNumberToObject(o, "frees", (double)t->n_free);
    if (r->has_measured) {
        cJSON_AddNumberToObject(o, "measured_peak_reserved_bytes",
                                (double)r->measured_peak_reserved);
        cJSON_AddNumberToObject(o, "measured_segment_allocs", (double)r->measured_segment_allocs);
        cJSON_AddBoolToObject(o, "segments_match", r->segments_match);
        cJSON_AddNumberToObject(o, "address_mismatches", (double)r->address_mismatches);
        if (!r->segments_match) {
            cJSON *m = cJSON_AddObjectToObject(o, "first_segment_mismatch");
            if (m) {
                size_t k = r->first_segment_mismatch;
                cJSON_AddNumberToObject(m, "index", (double)k);
                if (k < t->nmeasured)
                    cJSON_AddNumberToObject(m, "measured_bytes", (double)t->measured_segs[k]);
                else
                    cJSON_AddNullToObject(m, "measured_bytes");
                if (k < r->nsegs)
                    cJSON_AddNumberToObject(m, "replayed_bytes", (double)r->segs[k]);
                else
                    cJSON_AddNullToObject(m, "replayed_bytes");
            }
        }
    } else {
        cJSON_AddNullToObject(o, "measured_peak_reserved_bytes");
        cJSON_AddNullToObject(o, "segments_match");
    }
    cJSON_AddNumberToObject(o, "measured_ooms", (double)r->measured_ooms);
    if (r->oom) {
        cJSON *m = cJSON_AddObjectToObject(o, "oom");
        char msg[512];
        alloc_format_oom(&r->oom_info, cfg->fraction_set, msg, sizeof msg);
        if (m) {
            cJSON_AddNumberToObject(m, t->json ? "entry" : "line", r->oom_line);
            cJSON_AddNumberToObject(m, "requested_bytes", (double)r->oom_info.requested);
            cJSON_AddNumberToObject(m, "allocated_bytes", (double)r->oom_info.allocated);
            cJSON_AddNumberToObject(m, "reserved_unallocated_bytes",
                                    (double)r->oom_info.reserved_unallocated);
            cJSON_AddStringToObject(m, "message", msg);
        }
    } else {
        cJSON_AddNullToObject(o, "oom");
    }
    if (r->map) { /* --map: [{segment, offset, bytes, allocated, stream, small_pool}] */
        cJSON *arr = cJSON_AddArrayToObject(o, "map");
        for (size_t i = 0; arr && i < r->nmap; i++) {
            const AllocBlockInfo *k = &r->map[i];
            cJSON *b = cJSON_CreateObject();
            if (!b || !cJSON_AddItemToArray(arr, b)) {
                cJSON_Delete(b);
                break;
            }
            cJSON_AddNumberToObject(b, "segment", (double)k->segment_addr);
            cJSON_AddNumberToObject(b, "offset", (double)(k->addr - k->segment_addr));
            cJSON_AddNumberToObject(b, "bytes", (double)k->size);
            cJSON_AddBoolToObject(b, "allocated", k->allocated);
            cJSON_AddNumberToObject(b, "stream", k->stream);
            cJSON_AddBoolToObject(b, "small_pool", k->small_pool);
        }
    }
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    if (!s)
        return VR_EXIT_INTERNAL;
    puts(s);
    free(s);
    return VR_EXIT_OK;
}

/* Every segment and its blocks as the replay ended (--map), segments in address order. */
static void print_map(const ReplayResult *r)
{
    char a[48], b[48];
    printf("\nsegment map at the end of the replay (%zu blocks)\n", r->nmap);
    for (size_t i = 0; i < r->nmap; i++) {
        const AllocBlockInfo *k = &r->map[i];
        if (i == 0 || k->segment_addr != r->map[i - 1].segment_addr) {
            uint64_t seg = 0;
            for (size_t j = i; j < r->nmap && r->map[j].segment_addr == k->segment_addr; j++)
                seg += r->map[j].size;
            printf("segment 0x%" PRIx64 " %s, %s pool, stream %d\n", k->segment_addr,
                   mib(seg, a, sizeof a), k->small_pool ? "small" : "large", k->stream);
        }
        printf("  +%-14s %16s B  %s\n", commas(k->addr - k->segment_addr, a, sizeof a),
               commas(k->size, b, sizeof b), k->allocated ? "allocated" : "free");
    }
}

int cmd_replay(int argc, char **argv)
{
    const char *path = NULL, *conf = "";
    uint64_t capacity = 0, live_before = 0;
    bool json = false, ideal = false, list_segments = false, no_hints = false, map = false;
    long repeat = 0, check_every = 0, upto = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            replay_usage(stdout);
            return VR_EXIT_OK;
        } else if (strcmp(arg, "--json") == 0) {
            json = true;
        } else if (strcmp(arg, "--ideal") == 0) {
            ideal = true;
        } else if (strcmp(arg, "--segments") == 0) {
            list_segments = true;
        } else if (strcmp(arg, "--no-addresses") == 0) {
            no_hints = true;
        } else if (strcmp(arg, "--map") == 0) {
            map = true;
        } else if (strcmp(arg, "--upto") == 0) {
            char *end;
            upto = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || *end || upto < 1 || upto > 4000000000L) {
                fprintf(stderr, "vrsim replay: --upto needs a line number >= 1 (see vrsim replay "
                                "--help)\n");
                return VR_EXIT_USAGE;
            }
            i++;
        } else if (strcmp(arg, "--alloc-conf") == 0 || strcmp(arg, "--capacity") == 0 ||
                   strcmp(arg, "--live-before") == 0 || strcmp(arg, "--repeat") == 0 || strcmp(arg, "--check") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "vrsim replay: %s needs a value (see vrsim replay --help)\n", arg);
                return VR_EXIT_USAGE;
            }
            const char *v = argv[++i];
            if (strcmp(arg, "--alloc-conf") == 0) {
                conf = v;
            } else if (strcmp(arg, "--capacity") == 0 || strcmp(arg, "--live-before") == 0) {
                if (!parse_capacity(v, arg[2] == 'c' ? &capacity : &live_before)) {
                    fprintf(stderr, "vrsim replay: %s '%s': expected bytes or a size like "
                                    "10600MiB or 80GiB\n", arg, v);
                    return VR_EXIT_USAGE;
                }
            } else {
                /* internal: --repeat N replays N times and prints the rate (tests/bench.sh);
                 * --check N runs the model's invariant checker every N events */
                char *end;
                long n = strtol(v, &end, 10);
                if (*end || n < 1 || n > 1000000) {
                    fprintf(stderr, "vrsim replay: %s '%s': expected 1 .. 1000000\n", arg, v);
                    return VR_EXIT_USAGE;
                }
                if (strcmp(arg, "--repeat") == 0)
                    repeat = n;
                else
                    check_every = n;
            }
        } else if (arg[0] == '-' && arg[1] != 0) {
            fprintf(stderr, "vrsim replay: unknown option '%s' (see vrsim replay --help)\n", arg);
            return VR_EXIT_USAGE;
        } else if (!path) {
            path = arg;
        } else {
            fprintf(stderr, "vrsim replay: one trace at a time ('%s' and '%s')\n", path, arg);
            return VR_EXIT_USAGE;
        }
    }
    if (!path) {
        replay_usage(stderr);
        return VR_EXIT_USAGE;
    }
    AllocConfig cfg;
    alloc_config_default(&cfg);
    char err[512];
    VrStatus st = alloc_config_parse(&cfg, conf, err, sizeof err);
    if (st != VR_OK) {
        fprintf(stderr, "vrsim replay: --alloc-conf: %s\n", err);
        return VR_EXIT_USAGE;
    }
    if (cfg.gc_threshold > 0 && !capacity) {
        fprintf(stderr, "vrsim replay: garbage_collection_threshold needs a memory fraction: "
                        "give --capacity too\n");
        return VR_EXIT_USAGE;
    }
    cfg.capacity = capacity;
    cfg.fraction_set = capacity != 0;
    if (ideal)
        cfg.kind = ALLOC_IDEAL;
    char confs[512];
    alloc_config_format(&cfg, confs, sizeof confs);

    double t0 = vr_now_s();
    Trace *t;
    st = trace_load(path, &t, err, sizeof err);
    if (st != VR_OK) {
        fprintf(stderr, "vrsim replay: %s\n", err);
        return st == VR_ENOMEM ? VR_EXIT_INTERNAL : VR_EXIT_USAGE;
    }
    double t1 = vr_now_s();
    t->live_before = live_before;
    t->no_hints = no_hints;
    t->want_map = map;
    if (upto) {
        /* the events before the line; the file's own counts stay as read */
        size_t k = 0;
        while (k < t->n && t->ev[k].line <= (uint64_t)upto)
            k++;
        t->n = k;
        t->has_segment_events = false; /* the measured figures are the whole trace's */
        t->nmeasured = 0;
        t->measured_peak_reserved = 0;
    }
    ReplayResult r;
    long runs = repeat ? repeat : 1;
    for (long k = 0; k < runs; k++) {
        if (k)
            replay_result_clear(&r);
        st = replay_run_checked(t, &cfg, (size_t)check_every, &r, err, sizeof err);
        if (st != VR_OK)
            break;
    }
    double t2 = vr_now_s();
    if (st != VR_OK) {
        fprintf(stderr, "vrsim replay: %s\n", err);
        trace_free(t);
        return st == VR_ENOMEM ? VR_EXIT_INTERNAL : VR_EXIT_USAGE;
    }
    if (repeat) {
        double ev = (double)r.events * (double)runs;
        fprintf(stderr,
                "replay: %ld x %" PRIu64 " events in %.3f s = %.2f million events/s (reading the "
                "trace once: %.3f s; with it: %.2f million events/s)\n",
                runs, r.events, t2 - t1, ev / (t2 - t1) / 1e6, t1 - t0,
                (double)r.events / ((t2 - t1) / (double)runs + (t1 - t0)) / 1e6);
    }
    int rc = VR_EXIT_OK;
    if (json)
        rc = print_json(path, t, &cfg, confs, &r);
    else
        print_text(path, t, &cfg, confs, &r, list_segments);
    if (!json && map)
        print_map(&r);
    if (rc == VR_EXIT_OK && r.oom)
        rc = VR_EXIT_OOM;
    replay_result_clear(&r);
    trace_free(t);
    return rc;
}
