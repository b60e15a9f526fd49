/* scenario.c: Plan ownership and locating the Lua library; the Lua side is sim/bind/ (bind.c loads
 * a scenario, plan_read.c reads its plan). */
#include "scenario.h"
#include "pipeline.h"

#include "cost.h"
#include "engine.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void plan_free(Plan *p) {
    if (!p) return;
    if (!p->graph_borrowed) graph_free(p->graph);
    pipeline_plan_free(p->pp);
    cost_free(p->cost);
    free(p);
}

void plan_engine_config(const Plan *p, bool record_timeline, EngineConfig *out) {
    memset(out, 0, sizeof *out);
    out->steps = p->steps;
    out->cublas_handles = 2;
    out->dev = &p->dev;
    out->cost = p->cost;
    out->host_op_ns = p->host_op_ns;
    out->host_ckpt_op_ns = p->host_ckpt_op_ns;
    out->host_ckpt_region_ns = p->host_ckpt_region_ns;
    out->host_ckpt_saved_ns = p->host_ckpt_saved_ns;
    out->host_launch_ns = p->host_launch_ns;
    for (int k = 0; k < 2; k++) {
        out->host_compiled_kernel_ns[k] = p->host_compiled_kernel_ns[k];
        out->host_compiled_call_ns[k] = p->host_compiled_call_ns[k];
    }
    out->contention[0] = p->contention[0];
    out->contention[1] = p->contention[1];
    out->record_timeline = record_timeline;
    out->managed_bytes = (uint64_t)p->managed_bytes;
}

static bool has_plan_module(const char *dir) {
    char path[PATH_MAX + 32];
    struct stat st;
    snprintf(path, sizeof path, "%s/vrsim/plan.lua", dir);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool scenario_find_lua_dir(char *buf, size_t n) {
    const char *env = getenv("VRSIM_LUA");
    if (env && has_plan_module(env)) {
        snprintf(buf, n, "%s", env);
        return true;
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        /* the binary sits at the project root (./vrsim) or one level down (build-san/vrsim) */
        for (int up = 0; up < 2; up++) {
            char *slash = strrchr(exe, '/');
            if (!slash) break;
            *slash = 0;
            char cand[PATH_MAX + 8];
            if (strlen(exe) + 5 > PATH_MAX) break;
            snprintf(cand, sizeof cand, "%s/lua", exe);
            if (has_plan_module(cand)) {
                snprintf(buf, n, "%s", cand);
                return true;
            }
        }
    }
    if (has_plan_module("lua")) {
        snprintf(buf, n, "lua");
        return true;
    }
    return false;
}
