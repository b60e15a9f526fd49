/* fail_hook.h: a host memory hook (VrHostAllocFn) that fails the k-th allocation and every one
 * after it, for the fault tests of the modules that take one (graph_new_hosted,
 * EngineConfig.host_alloc): run a build with fail = k for every k until one goes through, and
 * each earlier run must come back as VR_ENOMEM with nothing leaked. */
#ifndef FAIL_HOOK_H
#define FAIL_HOOK_H

#include <stdlib.h>

typedef struct FailHook { long n, fail; } FailHook; /* calls so far; the first that fails */

static void *fail_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    (void)osize;
    FailHook *h = ud;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    if (h->n++ >= h->fail) return NULL; /* this call and every one after it */
    return realloc(ptr, nsize);
}

#endif
