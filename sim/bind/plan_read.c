/* plan_read.c: the plan table that lua/vrsim/plan.lua returns, read into a C Plan: the device,
 * its measured profile (with a cache of cost models made from one profile), NCCL and the
 * allocator's settings. */
#include <lauxlib.h>
#include <lua.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cost.h"
#include "../pipeline.h"
#include "../scenario.h"
#include "bind_int.h"

static void read_nccl(lua_State *L, int dev, DeviceSpec *d);

void read_device(lua_State *L, int t, DeviceSpec *d) {
    field_str(L, t, "key", d->key, sizeof d->key);
    field_str(L, t, "name", d->name, sizeof d->name);
    d->total_bytes = (uint64_t)field_num(L, t, "total_bytes", 0);
    d->context_bytes = (uint64_t)field_num(L, t, "context_bytes", 0);
    d->cublas_workspace_bytes = (uint64_t)field_num(L, t, "cublas_workspace_bytes", 0);
    d->mem_bw = field_num(L, t, "mem_bw", 0);
    d->eff_compute = field_num(L, t, "eff_compute", 1);
    d->eff_memory = field_num(L, t, "eff_memory", 1);
    d->launch_ns = field_num(L, t, "launch_ns", 0);
    d->sm_count = (int)field_num(L, t, "sm_count", 0);
    d->compute_capability = field_num(L, t, "compute_capability", 0);
    d->price_per_hour = field_num(L, t, "price_per_hour", 0);
    d->world = (int)field_num(L, t, "world", 1);
    d->coll_bw = field_num(L, t, "coll_bw", 0);
    d->coll_latency_ns = field_num(L, t, "coll_latency_ns", 0);
    d->gpus_per_node = (int)field_num(L, t, "gpus_per_node", 0);
    d->nics_per_node = (int)field_num(L, t, "nics_per_node", 0);
    d->nic_bw = field_num(L, t, "nic_bw", 0);
    d->nic_latency_ns = field_num(L, t, "nic_latency_ns", 0);
    d->replicate = (int)field_num(L, t, "replicate", 0);
    d->host_bw = field_num(L, t, "host_bw", 0);
    d->host_latency_ns = field_num(L, t, "host_latency_ns", 0);
    d->cpu_adam_rate = field_num(L, t, "cpu_adam_rate", 0);
    d->cpu_torch_adamw_rate = field_num(L, t, "cpu_torch_adamw_rate", 0);
    read_nccl(L, t, d);
    lua_getfield(L, t, "peak_flops");
    if (lua_istable(L, -1)) {
        int k = lua_gettop(L);
        for (int i = 0; i < DT_COUNT; i++) d->peak_flops[i] = field_num(L, k, dtype_name(i), 0);
    }
    lua_pop(L, 1);
}

/* The length of profile table `key` (0 when absent), left on the stack as a table or nil. */
static int profile_table(lua_State *L, int prof, const char *key) {
    lua_getfield(L, prof, key);
    if (lua_isnil(L, -1)) return 0;
    if (!lua_istable(L, -1)) luaL_error(L, "profile.%s must be a list of rows", key);
    return (int)luaL_len(L, -1);
}

/* Row i of the table on top of the stack, pushed; an error unless it is a table. */
static int profile_row(lua_State *L, const char *key, int i) {
    if (lua_geti(L, -1, i) != LUA_TTABLE) luaL_error(L, "profile.%s[%d] is not a row", key, i);
    return lua_gettop(L);
}

/* Copies `copy` and `elementwise` (the generic streaming curve), or `torch_ops` (with each row's
 * class, copied into names: n rows of 32 bytes), into rows[n..]; returns the new count. */
static int read_points(lua_State *L, int prof, const char *key, CostStreamRow *rows, int n,
                       char (*names)[32]) {
    int len = profile_table(L, prof, key);
    for (int i = 1; i <= len; i++) {
        int e = profile_row(L, key, i);
        rows[n] = (CostStreamRow){NULL, field_num(L, e, "ms", 0), field_num(L, e, "gbps", 0)};
        if (names) {
            lua_getfield(L, e, "class");
            size_t cl = 0;
            const char *cls = lua_tolstring(L, -1, &cl);
            if (cls && cl >= sizeof names[0])
                luaL_error(L, "profile.%s[%d]: class '%s' is longer than %d bytes", key, i, cls,
                           (int)sizeof names[0] - 1);
            snprintf(names[n], sizeof names[0], "%s", cls ? cls : "");
            rows[n].cls = names[n];
            lua_pop(L, 1);
        }
        n++;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return n;
}

/* Copies profile.sdpa (validation/harness/measure_sdpa.py: each shape with its time per
 * backend) into rows; returns the count. */
static int read_sdpa(lua_State *L, int prof, CostSdpaRow *rows) {
    int len = profile_table(L, prof, "sdpa");
    for (int i = 1; i <= len; i++) {
        int e = profile_row(L, "sdpa", i);
        CostSdpaRow *r = &rows[i - 1];
        *r = (CostSdpaRow){.batch = field_num(L, e, "batch", 0), .heads = field_num(L, e, "heads", 0),
                           .seq_q = field_num(L, e, "seq_q", 0), .seq_k = field_num(L, e, "seq_k", 0),
                           .dim = field_num(L, e, "dim", 0), .causal = field_bool(L, e, "causal", false),
                           .kernel_time = field_bool(L, e, "kernel_time", false),
                           .masked = field_bool(L, e, "masked", false)};
        lua_getfield(L, e, "backends");
        if (lua_istable(L, -1)) {
            int bt = lua_gettop(L);
            for (int b = 0; b < COST_SDPA_COUNT; b++) {
                if (lua_getfield(L, bt, cost_sdpa_backend(b)) == LUA_TTABLE) {
                    r->fwd_ms[b] = field_num(L, bt + 1, "fwd_ms", 0);
                    r->fwdbwd_ms[b] = field_num(L, bt + 1, "fwdbwd_ms", 0);
                }
                lua_pop(L, 1);
            }
        }
        lua_settop(L, e - 1);
    }
    lua_pop(L, 1);
    return len;
}

/* The cost models made from calibrated profiles, kept for the life of the process. A profile
 * that lua/vrsim/hardware.lua marks with a cost_key (the GPU whose calibrated files it joined, and
 * whether it took their LoRA table) holds the same rows every time it is read from one lua/
 * folder, so its curves are made once, and each plan gets a copy priced on its own device
 * (cost_clone: the same curves to the bit). The rows are some 60,000 fields; a sweep's parent
 * reads them before it forks its workers, so no point reads them again. */
#define COST_CACHE 16
static struct CostCache {
    char key[PATH_MAX + 64];
    CostModel *model;
} cost_cache[COST_CACHE];
static int n_cost_cache;

/* The cache's key of the profile at prof (its cost_key under this state's lua/ folder) into key,
 * or false when it has none, or one too long to keep whole. */
static bool cost_cache_key(lua_State *L, int prof, char *key, size_t n) {
    bool keyed = false;
    if (lua_getfield(L, prof, "cost_key") == LUA_TSTRING) {
        Sandbox *sb;
        lua_getallocf(L, (void **)&sb);
        size_t len;
        const char *ck = lua_tolstring(L, -1, &len);
        int w = snprintf(key, n, "%s|%s", sb->lua_real, ck);
        keyed = w >= 0 && (size_t)w < n && strlen(ck) == len;
    }
    lua_pop(L, 1);
    return keyed;
}

static CostModel *cost_cached(const char *key) {
    for (int i = 0; i < n_cost_cache; i++)
        if (strcmp(cost_cache[i].key, key) == 0) return cost_cache[i].model;
    return NULL;
}

/* The n rows of table tbl's "gemm" list into rows, each row's dtype name in dtypes (a profile's
 * grid, or a GPU's own measured rows). */
static void read_gemm_rows(lua_State *L, int tbl, CostGemmRow *rows, char (*dtypes)[16], int n) {
    profile_table(L, tbl, "gemm");
    for (int i = 1; i <= n; i++) {
        int e = profile_row(L, "gemm", i);
        const char *dt = field_str(L, e, "dtype", dtypes[i - 1], sizeof dtypes[0]);
        rows[i - 1] = (CostGemmRow){dt, field_num(L, e, "m", 0), field_num(L, e, "n", 0),
                                    field_num(L, e, "k", 0), field_num(L, e, "batch", 1),
                                    field_num(L, e, "tflops", 0),
                                    field_bool(L, e, "kernel_time", false)};
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* Reads the profile's rows at prof into a cost model for p->dev (p->cost). */
static void read_profile_rows(lua_State *L, int prof, Plan *p) {
    /* the grid a profile's `gemm` table holds (hardware.lua puts the idle-card grid of <gpu>_gemm.lua
     * there when there is one: a step's GEMMs run below the power limit, so a gemm_sustained
     * table is a record, not read) */
    int n_gemm = profile_table(L, prof, "gemm");
    lua_pop(L, 1);
    int n_stream = profile_table(L, prof, "copy");
    lua_pop(L, 1);
    n_stream += profile_table(L, prof, "elementwise");
    lua_pop(L, 1);
    int n_ops = profile_table(L, prof, "torch_ops");
    lua_pop(L, 1);
    int n_sdpa = profile_table(L, prof, "sdpa");
    lua_pop(L, 1);
    int n_lora = profile_table(L, prof, "lora_gemm");
    lua_pop(L, 1);
    /* the rows live in userdata (freed by Lua's collector if a field raises), dtype and class
     * names copied into it: nothing borrowed from Lua outlives this call */
    size_t bytes = sizeof(CostGemmRow) * (size_t)n_gemm + sizeof(char[16]) * (size_t)n_gemm +
                   sizeof(CostStreamRow) * (size_t)(n_stream + n_ops) + sizeof(char[32]) * (size_t)n_ops +
                   sizeof(CostSdpaRow) * (size_t)n_sdpa + sizeof(CostLoraRow) * (size_t)n_lora +
                   sizeof(char[16]) * 2 * (size_t)n_lora;
    char *buf = lua_newuserdatauv(L, bytes ? bytes : 1, 0);
    CostGemmRow *gemm = (CostGemmRow *)buf;
    CostSdpaRow *sdpa = (CostSdpaRow *)(gemm + n_gemm);
    CostLoraRow *lora = (CostLoraRow *)(sdpa + n_sdpa);
    CostStreamRow *stream = (CostStreamRow *)(lora + n_lora);
    CostStreamRow *ops = stream + n_stream;
    char (*dtypes)[16] = (char (*)[16])(ops + n_ops);
    char (*lora_names)[16] = dtypes + n_gemm; /* per row: its dtype, then its gemm */
    char (*classes)[32] = (char (*)[32])(lora_names + 2 * n_lora);
    read_gemm_rows(L, prof, gemm, dtypes, n_gemm);
    int ns = read_points(L, prof, "copy", stream, 0, NULL);
    read_points(L, prof, "elementwise", stream, ns, NULL);
    /* PyTorch's kernels by memory-access class (validation/harness/measure_torch_ops.py) */
    read_points(L, prof, "torch_ops", ops, 0, classes);
    read_sdpa(L, prof, sdpa);
    /* LoRA adapters' GEMMs, kernel time by rank, tokens and width (measure_lora_gemms.py) */
    profile_table(L, prof, "lora_gemm");
    for (int i = 1; i <= n_lora; i++) {
        int e = profile_row(L, "lora_gemm", i);
        lora[i - 1] = (CostLoraRow){field_str(L, e, "dtype", lora_names[2 * (i - 1)], sizeof lora_names[0]),
                                    field_str(L, e, "gemm", lora_names[2 * (i - 1) + 1], sizeof lora_names[0]),
                                    field_num(L, e, "rank", 0), field_num(L, e, "tokens", 0),
                                    field_num(L, e, "width", 0), field_num(L, e, "ms", 0)};
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    CostProfile cp = {gemm, n_gemm, stream, n_stream, ops, n_ops, sdpa, n_sdpa, lora, n_lora,
                      field_num(L, prof, "launch_device_us", 0), field_num(L, prof, "kernel_gap_us", 0)};
    char why[160], src[200] = "?";
    VrStatus st = cost_from_profile(&p->dev, &cp, &p->cost, why, sizeof why);
    if (st == VR_ENOMEM) luaL_error(L, "out of memory building the cost model of %s", p->dev.key);
    if (st) {
        field_str(L, prof, "source", src, sizeof src);
        luaL_error(L, "the calibrated profile of %s (%s): %s", p->dev.key, src, why);
    }
    lua_pop(L, 1); /* the rows */
}

/* Makes the plan's cost model price a mixture of experts' grouped GEMMs and dispatch index ops
 * from device.grouped_mm (lua/hw/calibrated/<gpu>_grouped_mm.lua of the simulated GPU itself,
 * hardware.lua), if any: its `grouped_mm` and `moe_index` rows (cost.h cost_set_moe). Called after
 * the reference profile's carry, so these figures are never carried. */
static void read_moe(lua_State *L, int dev, Plan *p) {
    if (lua_getfield(L, dev, "grouped_mm") != LUA_TTABLE) { lua_pop(L, 1); return; }
    int t = lua_gettop(L);
    int n_gmm = profile_table(L, t, "grouped_mm");
    lua_pop(L, 1);
    int n_ix = profile_table(L, t, "moe_index");
    lua_pop(L, 1);
    /* rows and their names in userdata (freed by the collector if a field raises) */
    size_t bytes = (sizeof(CostGroupedRow) + 3 * sizeof(char[64])) * (size_t)n_gmm +
                   (sizeof(CostMoeIndexRow) + sizeof(char[32])) * (size_t)n_ix;
    char *buf = lua_newuserdatauv(L, bytes ? bytes : 1, 0);
    CostGroupedRow *gmm = (CostGroupedRow *)buf;
    CostMoeIndexRow *ix = (CostMoeIndexRow *)(gmm + n_gmm);
    char (*gnames)[64] = (char (*)[64])(ix + n_ix); /* per row: gemm, layout, routing */
    char (*inames)[32] = (char (*)[32])(gnames + 3 * n_gmm);
    profile_table(L, t, "grouped_mm");
    for (int i = 1; i <= n_gmm; i++) {
        int e = profile_row(L, "grouped_mm", i);
        char (*nm)[64] = gnames + 3 * (i - 1);
        gmm[i - 1] = (CostGroupedRow){field_str(L, e, "gemm", nm[0], sizeof nm[0]),
                                      field_str(L, e, "layout", nm[1], sizeof nm[1]),
                                      field_str(L, e, "routing", nm[2], sizeof nm[2]),
                                      field_num(L, e, "experts", 0), field_num(L, e, "rows", 0),
                                      field_num(L, e, "n", 0), field_num(L, e, "k", 0), field_num(L, e, "ms", 0)};
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    profile_table(L, t, "moe_index");
    for (int i = 1; i <= n_ix; i++) {
        int e = profile_row(L, "moe_index", i);
        ix[i - 1] = (CostMoeIndexRow){field_str(L, e, "op", inames[i - 1], sizeof inames[0]),
                                      field_num(L, e, "n", 0), field_num(L, e, "src_rows", 0),
                                      field_num(L, e, "width", 0), field_num(L, e, "ms", 0)};
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    char why[160], src[200] = "?";
    VrStatus st = cost_set_moe(p->cost, gmm, n_gmm, ix, n_ix, why, sizeof why);
    if (st == VR_ENOMEM) luaL_error(L, "out of memory building the cost model of %s", p->dev.key);
    if (st) {
        field_str(L, t, "source", src, sizeof src);
        luaL_error(L, "the grouped GEMM table of %s (%s): %s", p->dev.key, src, why);
    }
    lua_settop(L, t - 1);
}

/* Replaces classes of the plan's carried cost model with the rows of the table at index t
 * (cost.h cost_measured_here): its `torch_ops` rows (each row's class replaces the class of that
 * name), its `copy` / `elementwise` rows if any (the streaming curve) and its `kernel_gap_us` if
 * above 0. Two tables take this path after the carry: device.carry's split classes (lua/hw/
 * carry.lua carried_rows: the classes a second GPU measured too, split into DRAM and SM parts)
 * and device.measured_here (hardware.lua: the simulated GPU's own measurements,
 * lua/hw/calibrated/<gpu>_torch_ops.lua and its supplements). what names the table in an error. */
static void read_class_rows(lua_State *L, int t, Plan *p, const char *what) {
    int n_stream = profile_table(L, t, "copy");
    lua_pop(L, 1);
    n_stream += profile_table(L, t, "elementwise");
    lua_pop(L, 1);
    int n_ops = profile_table(L, t, "torch_ops");
    lua_pop(L, 1);
    if (n_stream + n_ops == 0 && !(field_num(L, t, "kernel_gap_us", 0) > 0)) return;
    size_t bytes = sizeof(CostStreamRow) * (size_t)(n_stream + n_ops) + sizeof(char[32]) * (size_t)n_ops;
    char *buf = lua_newuserdatauv(L, bytes ? bytes : 1, 0);
    CostStreamRow *stream = (CostStreamRow *)buf;
    CostStreamRow *ops = stream + n_stream;
    char (*classes)[32] = (char (*)[32])(ops + n_ops);
    int ns = read_points(L, t, "copy", stream, 0, NULL);
    read_points(L, t, "elementwise", stream, ns, NULL);
    read_points(L, t, "torch_ops", ops, 0, classes);
    CostProfile rows = {.stream = stream, .n_stream = n_stream, .torch_ops = ops, .n_torch_ops = n_ops,
                        .kernel_gap_us = field_num(L, t, "kernel_gap_us", 0)};
    char why[160], src[200] = "?";
    VrStatus st = cost_measured_here(p->cost, &rows, why, sizeof why);
    if (st == VR_ENOMEM) luaL_error(L, "out of memory building the cost model of %s", p->dev.key);
    if (st) {
        field_str(L, t, "source", src, sizeof src);
        luaL_error(L, "%s of %s (%s): %s", what, p->dev.key, src, why);
    }
    lua_pop(L, 1); /* the rows */
}

/* Raises what a GPU's own measured table (at index t, its `source` named) did not give the cost
 * model: st from cost_measured_sdpa / cost_measured_gemm, why its reason; `what` the table's rows. */
static void measured_raise(lua_State *L, int t, const Plan *p, VrStatus st, const char *why, const char *what) {
    if (st == VR_ENOMEM) luaL_error(L, "out of memory building the cost model of %s", p->dev.key);
    if (st) {
        char src[200] = "?";
        field_str(L, t, "source", src, sizeof src);
        luaL_error(L, "the %s measured for %s (%s): %s", what, p->dev.key, src,
                   why[0] ? why : "sm and rate must be > 0");
    }
}

/* Replaces the plan's fused-attention curves with device.sdpa_measured (hardware.lua: kernel-time
 * sdpa rows measured on the simulated GPU, or on a GPU of its architecture and carried by `sm` and
 * `rate`; cost.h cost_measured_sdpa), if any. Called after the carry, so these rows are not
 * carried again from the reference's. */
static void read_measured_sdpa(lua_State *L, int dev, Plan *p) {
    if (lua_getfield(L, dev, "sdpa_measured") != LUA_TTABLE) { lua_pop(L, 1); return; }
    int t = lua_gettop(L);
    int n = profile_table(L, t, "sdpa");
    lua_pop(L, 1);
    CostSdpaRow *rows = lua_newuserdatauv(L, sizeof(CostSdpaRow) * (size_t)(n > 0 ? n : 1), 0);
    read_sdpa(L, t, rows);
    char why[160];
    VrStatus st = cost_measured_sdpa(p->cost, rows, n, field_num(L, t, "sm", 0), field_num(L, t, "rate", 0),
                                     why, sizeof why);
    measured_raise(L, t, p, st, why, "attention kernels");
    lua_settop(L, t - 1);
}

/* Replaces the plan's GEMM curves of the dtypes device.gemm_measured has (hardware.lua: gemm rows
 * measured on the simulated GPU, or on a GPU of its architecture and carried by `sm` and `rate`;
 * cost.h cost_measured_gemm), if any. Called after the carry, so these rows are not carried again. */
static void read_measured_gemm(lua_State *L, int dev, Plan *p) {
    if (lua_getfield(L, dev, "gemm_measured") != LUA_TTABLE) { lua_pop(L, 1); return; }
    int t = lua_gettop(L);
    int n = profile_table(L, t, "gemm");
    lua_pop(L, 1);
    /* rows and their dtype names in userdata (freed by the collector if a field raises) */
    size_t bytes = (sizeof(CostGemmRow) + sizeof(char[16])) * (size_t)(n > 0 ? n : 1);
    CostGemmRow *rows = lua_newuserdatauv(L, bytes, 0);
    char (*dtypes)[16] = (char (*)[16])(rows + (n > 0 ? n : 1));
    read_gemm_rows(L, t, rows, dtypes, n);
    char why[160];
    VrStatus st = cost_measured_gemm(p->cost, rows, n, field_num(L, t, "sm", 0), field_num(L, t, "rate", 0),
                                     why, sizeof why);
    measured_raise(L, t, p, st, why, "GEMMs");
    lua_settop(L, t - 1);
}

/* Builds the plan's cost model from device.profile (a calibrated profile table), if any: its
 * tables copied into the cost module's rows (cost.h, cost_from_profile, turns them into curves),
 * or the process's model of the same rows copied. */
void read_profile(lua_State *L, int dev, Plan *p) {
    lua_getfield(L, dev, "profile");
    if (!lua_istable(L, -1)) { lua_pop(L, 1); return; }
    int prof = lua_gettop(L);
    char key[sizeof cost_cache[0].key];
    bool keyed = cost_cache_key(L, prof, key, sizeof key);
    const CostModel *kept = keyed ? cost_cached(key) : NULL;
    if (kept) {
        if (cost_clone(kept, &p->dev, &p->cost))
            luaL_error(L, "out of memory building the cost model of %s", p->dev.key);
    } else {
        read_profile_rows(L, prof, p);
        CostModel *copy;
        if (keyed && n_cost_cache < COST_CACHE && !cost_clone(p->cost, &p->dev, &copy)) {
            snprintf(cost_cache[n_cost_cache].key, sizeof cost_cache[0].key, "%s", key);
            cost_cache[n_cost_cache++].model = copy;
        }
    }
    /* a GPU without a profile of its own: the reference GPU's profile carried to it
     * (device.carry, made by lua/hw/carry.lua; cost.h says what is carried and how) */
    lua_getfield(L, dev, "carry");
    if (lua_istable(L, -1)) {
        int ct = lua_gettop(L);
        CostCarry k = {.sm = field_num(L, ct, "sm", 0), .bw = field_num(L, ct, "bw", 0)};
        lua_getfield(L, ct, "compute");
        if (lua_istable(L, -1))
            for (int d = 0; d < DT_COUNT; d++) k.compute[d] = field_num(L, lua_gettop(L), dtype_name(d), 0);
        lua_pop(L, 1);
        lua_getfield(L, ct, "attention"); /* { flash = ratio, ... }: a backend's architecture ratio */
        if (lua_istable(L, -1))
            for (int b = 0; b < COST_SDPA_COUNT; b++)
                k.attention[b] = field_num(L, lua_gettop(L), cost_sdpa_backend(b), 0);
        lua_pop(L, 1);
        if (cost_carry(p->cost, &p->dev, &k))
            luaL_error(L, "cannot carry the calibrated profile to %s: bad ratios", p->dev.key);
        /* the classes split into DRAM and SM parts, in place of their DRAM-ratio carry */
        read_class_rows(L, ct, p, "the carried memory-bound classes");
    }
    lua_pop(L, 1);
    /* the memory-bound kernels the simulated GPU measured itself, in place of their carried classes */
    if (lua_getfield(L, dev, "measured_here") == LUA_TTABLE)
        read_class_rows(L, lua_gettop(L), p, "the kernels measured on this GPU");
    lua_pop(L, 1);
    read_measured_sdpa(L, dev, p);
    read_measured_gemm(L, dev, p);
    read_moe(L, dev, p);
    double host_us = field_num(L, prof, "host_op_us", field_num(L, prof, "launch_us", 0));
    p->host_op_ns = host_us * 1e3;
    p->host_ckpt_op_ns = field_num(L, prof, "host_ckpt_op_us", 0) * 1e3;
    p->host_ckpt_region_ns = field_num(L, prof, "host_ckpt_region_us", 0) * 1e3;
    p->host_ckpt_saved_ns = field_num(L, prof, "host_ckpt_saved_us", 0) * 1e3;
    p->host_launch_ns = field_num(L, prof, "launch_us", 0) * 1e3; /* empty kernel, back to back */
    p->host_compiled_kernel_ns[0] = field_num(L, prof, "host_compiled_kernel_fwd_us", 0) * 1e3;
    p->host_compiled_kernel_ns[1] = field_num(L, prof, "host_compiled_kernel_bwd_us", 0) * 1e3;
    p->host_compiled_call_ns[0] = field_num(L, prof, "host_compiled_call_fwd_us", 0) * 1e3;
    p->host_compiled_call_ns[1] = field_num(L, prof, "host_compiled_call_bwd_us", 0) * 1e3;
    /* compute kernels slowed by a collective beside them: the card's own figure, measured
     * (measure_contention.py) or published (lua/hw/calibrated/<gpu>_contention.lua), if any */
    if (lua_getfield(L, prof, "contention") == LUA_TTABLE) {
        int ct = lua_gettop(L);
        p->contention[0] = field_num(L, ct, "compute", 0);
        p->contention[1] = field_num(L, ct, "memory", 0);
        if (!(p->contention[0] >= 0 && p->contention[0] < 10 && p->contention[1] >= 0 && p->contention[1] < 10))
            luaL_error(L, "profile contention: compute and memory must be in [0, 10)");
    }
    lua_pop(L, 1);
    /* which kind of figure the step time rests on (measured here, carried from the reference) */
    if (!field_str(L, prof, "basis", p->profile, sizeof p->profile))
        field_str(L, prof, "source", p->profile, sizeof p->profile);
    lua_settop(L, prof - 1);
}

/* Fits each collective's latency and bus bandwidth from device.nccl (measured points of a
 * calibrated link profile: {op=, bytes=, ms=}) with the ranks of device.nccl_ranks. */
static void read_nccl(lua_State *L, int dev, DeviceSpec *d) {
    lua_getfield(L, dev, "nccl");
    if (!lua_istable(L, -1)) { lua_pop(L, 1); return; }
    int t = lua_gettop(L);
    int ranks = (int)field_num(L, dev, "nccl_ranks", 2);
    int len = (int)luaL_len(L, t);
    /* every row is read (userdata: freed by the collector if a field raises) */
    CollPoint *pts = lua_newuserdatauv(L, sizeof *pts * (size_t)(len > 0 ? len : 1), 0);
    for (int k = 0; k < COLL_COUNT; k++) {
        int n = 0;
        for (int i = 1; i <= len; i++) {
            lua_geti(L, t, i);
            int e = lua_gettop(L);
            char op[32] = "";
            field_str(L, e, "op", op, sizeof op);
            CollKind ck;
            if (!coll_kind_parse(op, &ck) && (int)ck == k) {
                double bytes = field_num(L, e, "bytes", 0);
                pts[n++] = (CollPoint){coll_bus_bytes(ck, bytes, ranks), ranks,
                                       field_num(L, e, "ms", 0) * 1e6};
            }
            lua_pop(L, 1);
        }
        if (n >= 2 && coll_fit(pts, n, &d->coll[k]) != VR_OK) d->coll[k] = (CollLink){0, 0};
    }
    lua_pop(L, 2); /* the points, the nccl table */
}

void read_alloc(lua_State *L, int t, AllocConfig *a) {
    char kind[16];
    alloc_config_default(a);
    /* the conf string is parsed where it lies: any length, never cut to a buffer */
    lua_getfield(L, t, "conf");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "allocator.conf must be a string");
        size_t n;
        const char *conf = lua_tolstring(L, -1, &n);
        if (strlen(conf) != n) luaL_error(L, "allocator.conf holds a NUL byte");
        char err[256];
        if (n && alloc_config_parse(a, conf, err, sizeof err)) luaL_error(L, "allocator.conf: %s", err);
    }
    lua_pop(L, 1);
    if (field_str(L, t, "kind", kind, sizeof kind)) {
        if (strcmp(kind, "ideal") == 0) a->kind = ALLOC_IDEAL;
        else if (strcmp(kind, "caching") == 0) a->kind = ALLOC_CACHING;
        else luaL_error(L, "allocator.kind must be \"caching\" or \"ideal\", not \"%s\"", kind);
    }
    /* 0 would be "no limit" to the allocator model: a capacity is always given, and positive */
    double cap = field_num(L, t, "capacity_bytes", 0);
    if (!(cap >= 1 && cap <= 1e18)) {
        char b[32];
        snprintf(b, sizeof b, "%.0f", cap);
        luaL_error(L, "the memory PyTorch may use must be between 1 byte and 1e18 bytes, not %s "
                   "(hardware.capacity_gib, capacity_mib, memory_fraction)", b);
    }
    a->capacity = (uint64_t)cap;
    a->fraction_set = field_bool(L, t, "fraction_set", false);
}

/* The plan's pipeline rank (lua/vrsim/pipeline.lua P.run's table) into p->pp, which p owns from
 * the moment it is made (a raise after leaves it to plan_free). */
void read_pp(lua_State *L, int t, Plan *p) {
    PpPlan *pp = calloc(1, sizeof *pp);
    if (!pp) luaL_error(L, "out of host memory");
    p->pp = pp;
    pp->ranks = (int)field_int(L, t, "ranks", 1);
    pp->stages = (int)field_int(L, t, "stages", 1);
    pp->virtual_stages = (int)field_int(L, t, "virtual", 1);
    pp->microbatches = (int)field_int(L, t, "microbatches", 1);
    pp->rank = (int)field_int(L, t, "rank", 0);
    pp->send_bytes = field_num(L, t, "send_bytes", 0);
    pp->shape_bytes = field_num(L, t, "shape_bytes", 0);
    field_str(L, t, "schedule", pp->schedule, sizeof pp->schedule);
    if (pp->ranks < 1 || pp->stages < pp->ranks || pp->stages > 1 << 16 || pp->microbatches < 1)
        luaL_error(L, "the plan's pipeline: %d stages on %d ranks", pp->stages, pp->ranks);
    pp->gpus_per_rank = p->gpus / pp->ranks > 0 ? p->gpus / pp->ranks : 1;
    lua_getfield(L, t, "stage_layers");
    luaL_checktype(L, -1, LUA_TTABLE);
    if (!(pp->stage_layers = calloc((size_t)pp->stages, sizeof(int)))) luaL_error(L, "out of host memory");
    for (int i = 0; i < pp->stages; i++) {
        lua_rawgeti(L, -1, i + 1);
        pp->stage_layers[i] = (int)lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_getfield(L, t, "actions");
    luaL_checktype(L, -1, LUA_TTABLE);
    int at = lua_gettop(L);
    lua_Integer n = luaL_len(L, at);
    if (n < 0 || n > 1 << 24) luaL_error(L, "the plan's pipeline: %d actions", (int)n);
    pp->actions = calloc((size_t)n + 1, sizeof(PpAction));
    pp->op_first = calloc((size_t)n + 1, sizeof(int));
    pp->op_end = calloc((size_t)n + 1, sizeof(int));
    if (!pp->actions || !pp->op_first || !pp->op_end) luaL_error(L, "out of host memory");
    for (lua_Integer i = 0; i < n; i++) {
        lua_rawgeti(L, at, i + 1);
        int a = lua_gettop(L);
        pp->actions[i] = (PpAction){.stage = (int)field_int(L, a, "stage", 0),
                                    .kind = (PpKind)field_int(L, a, "kind", 0),
                                    .mb = (int)field_int(L, a, "mb", 0),
                                    .slot = (int)field_int(L, a, "slot", -1)};
        pp->op_first[i] = (int)field_int(L, a, "op_first", 0);
        pp->op_end[i] = (int)field_int(L, a, "op_end", 0);
        lua_pop(L, 1);
    }
    pp->n_actions = (int)n;
    lua_pop(L, 1);
    lua_getfield(L, t, "lockstep");
    pp->lockstep = lua_toboolean(L, -1);
    lua_pop(L, 1);
}
