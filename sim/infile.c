/* infile.c: the one checked way vrsim opens a file it reads (infile.h). */
#include "infile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

InfileStatus infile_open(const char *path, uint64_t max, int *fd, uint64_t *size) {
    *fd = -1;
    *size = 0;
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0) return INFILE_MISSING;
    struct stat st;
    if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(f);
        return INFILE_NOTFILE;
    }
    if (st.st_size < 0 || (uintmax_t)st.st_size > max) {
        close(f);
        return INFILE_TOOBIG;
    }
    /* a regular file never blocks, but readers that hand the descriptor to stdio or zlib expect
     * ordinary blocking reads */
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0) fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    *size = (uint64_t)st.st_size;
    return INFILE_OK;
}

InfileStatus infile_read(const char *path, size_t max, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    int fd;
    uint64_t size;
    InfileStatus s = infile_open(path, max, &fd, &size);
    if (s != INFILE_OK) return s;
    /* sized by fstat, grown (up to max + 1 bytes, to see a file that grew past max) if the file
     * grows while it is read */
    size_t cap = (size_t)size + 1, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) { close(fd); return INFILE_NOMEM; }
    for (;;) {
        if (n == cap) {
            if (cap > max) { free(buf); close(fd); return INFILE_TOOBIG; }
            size_t nc = cap * 2 > max + 1 ? max + 1 : cap * 2;
            char *nb = realloc(buf, nc + 1);
            if (!nb) { free(buf); close(fd); return INFILE_NOMEM; }
            buf = nb;
            cap = nc;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { free(buf); close(fd); return INFILE_IO; }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (n > max) { free(buf); return INFILE_TOOBIG; }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return INFILE_OK;
}

const char *infile_reason(InfileStatus s) {
    switch (s) {
    case INFILE_OK: return "ok";
    case INFILE_MISSING: return "cannot open it (no such file, or no permission)";
    case INFILE_NOTFILE: return "not a regular file (a FIFO, device, socket or folder)";
    case INFILE_TOOBIG: return "too large: refused";
    case INFILE_NOMEM: return "out of host memory reading it";
    case INFILE_IO: return "could not be read";
    }
    return "could not be read";
}
