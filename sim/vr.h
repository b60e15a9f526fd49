/* vr.h: status codes, exit codes and small shared definitions for every vrsim module.
 *
 * Core functions return a VrStatus and pass results through OUT parameters. A simulated GPU
 * out-of-memory is a result, not an error (VR_OOM is returned only by allocation calls, so the
 * caller can record it on the timeline). Host allocation failure is VR_ENOMEM, never an abort. */
#ifndef VR_H
#define VR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum VrStatus {
    VR_OK = 0,
    VR_EINVAL,   /* bad input: the message says which */
    VR_ENOMEM,   /* host allocation failed */
    VR_EIO,      /* a file could not be read or written */
    VR_OOM,      /* the simulated device ran out of memory */
    VR_ENOTSUP,  /* valid input the simulator cannot model yet */
} VrStatus;

/* A host memory hook, shaped like lua_Alloc: nsize == 0 frees ptr (returns NULL); otherwise
 * returns a block of nsize bytes holding the first min(osize, nsize) bytes of ptr (as realloc
 * does: osize is ptr's size where the caller knows it, else 0), or NULL on failure (ptr then
 * stays valid). The allocator (AllocConfig), the engine (EngineConfig) and graphs
 * (graph_new_hosted) take one, so that tests can fail the Nth host allocation; NULL = the C
 * library. */
typedef void *(*VrHostAllocFn)(void *ud, void *ptr, size_t osize, size_t nsize);

/* One host (re)allocation through fn (with ud), or the C library when fn is NULL, with
 * VrHostAllocFn's contract: nsize == 0 frees p (freeing NULL calls nothing) and returns NULL. The
 * engine and graphs allocate through it. */
void *vr_host_realloc(VrHostAllocFn fn, void *ud, void *p, size_t osize, size_t nsize);

/* Process exit statuses, the same for every subcommand (docs/scenarios.md). */
enum {
    VR_EXIT_OK = 0,     /* success; for a scenario, it fits */
    VR_EXIT_INTERNAL = 1,
    VR_EXIT_USAGE = 2,  /* bad input or usage */
    VR_EXIT_OOM = 3,    /* the scenario does not fit */
};

#define VR_KIB ((uint64_t)1024)
#define VR_MIB ((uint64_t)1024 * 1024)
#define VR_GIB ((uint64_t)1024 * 1024 * 1024)

const char *vr_status_str(VrStatus s);

/* Writes all n bytes of p to fd, retrying short writes and EINTR. False on any other failure. */
bool vr_write_all(int fd, const void *p, size_t n);
/* Reads exactly n bytes from fd (retrying short reads and EINTR); false at end of file first or
 * on an error. */
bool vr_read_all(int fd, void *p, size_t n);

/* FNV-1a of the n bytes at p folded into h (start from VR_HASH_INIT), with a separator after
 * them, so the pieces "ab","c" hash unlike "a","bc". For keys, not for security. */
#define VR_HASH_INIT 14695981039346656037ULL
uint64_t vr_hash(uint64_t h, const void *p, size_t n);

/* A new string formatted as printf would (the caller frees it); NULL when out of memory. No
 * length limit: for paths and values that must never be cut to fit a buffer. */
char *vr_strfmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The folder of path as a new string: "." for a bare name, "/" for one at the root; NULL when
 * out of memory. */
char *vr_dirname(const char *path);

/* The release, bumped with each tagged version. */
#define VRSIM_VERSION "0.14.0"

/* Seconds on the monotonic clock (for timeouts and rates; no meaning as a date). */
double vr_now_s(void);
/* Seconds of CPU this process has used (a bound on work that a loaded machine must not move). */
double vr_cpu_s(void);

#endif
