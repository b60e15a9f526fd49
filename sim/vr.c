/* vr.c: small shared helpers for every vrsim module (vr.h). */
#include "vr.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A short English name for a status, for messages. Never NULL. */
const char *vr_status_str(VrStatus s)
{
    switch (s) {
    case VR_OK:
        return "ok";
    case VR_EINVAL:
        return "invalid input";
    case VR_ENOMEM:
        return "out of host memory";
    case VR_EIO:
        return "input/output error";
    case VR_OOM:
        return "simulated device out of memory";
    case VR_ENOTSUP:
        return "not supported by the simulator yet";
    }
    return "unknown status";
}

bool vr_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

bool vr_read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        c += r;
        n -= (size_t)r;
    }
    return true;
}

double vr_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double vr_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint64_t vr_hash(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ULL;
    return (h ^ 0xff) * 1099511628211ULL;
}

void *vr_host_realloc(VrHostAllocFn fn, void *ud, void *p, size_t osize, size_t nsize) {
    if (nsize == 0 && !p) return NULL;
    if (fn) return fn(ud, p, osize, nsize);
    if (nsize == 0) {
        free(p);
        return NULL;
    }
    return realloc(p, nsize);
}

char *vr_strfmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

char *vr_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return vr_strfmt(".");
    if (slash == path) return vr_strfmt("/");
    return vr_strfmt("%.*s", (int)(slash - path), path);
}
