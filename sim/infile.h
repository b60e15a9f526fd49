/* infile.h: how vrsim opens every file it reads (scenarios, modules, configs, validation
 * records, allocator traces): one checked way, so that no command can be stalled by a FIFO or a
 * device, or made to read a folder or an unbounded file.
 *
 * The file is opened without blocking (O_NONBLOCK: opening a FIFO with no writer, or a terminal,
 * returns at once), then fstat on the open descriptor (not the path, which could change between
 * the two) must say a regular file of at most the caller's limit. Only then is anything read. */
#ifndef VR_INFILE_H
#define VR_INFILE_H

#include <stddef.h>
#include <stdint.h>

typedef enum InfileStatus {
    INFILE_OK = 0,
    INFILE_MISSING,  /* no such file, or it cannot be opened (permissions, a dangling link) */
    INFILE_NOTFILE,  /* a FIFO, a device, a socket or a folder */
    INFILE_TOOBIG,   /* larger than the limit (or it grew past it while being read) */
    INFILE_NOMEM,    /* host memory ran out */
    INFILE_IO,       /* a read failed */
} InfileStatus;

/* Opens path for reading and checks it as above. On INFILE_OK *fd is the open descriptor
 * (blocking again, close-on-exec; the caller closes it) and *size the file's size in bytes. On
 * any other status *fd is -1 and nothing is left open. */
InfileStatus infile_open(const char *path, uint64_t max, int *fd /* OUT */,
                         uint64_t *size /* OUT */);

/* infile_open, then the whole file read into a new NUL-terminated buffer (*out, *len bytes not
 * counting the NUL; the caller frees *out). A file that grows while being read is read up to
 * max bytes and then refused (INFILE_TOOBIG). On failure *out is NULL. */
InfileStatus infile_read(const char *path, size_t max, char **out /* OUT */,
                         size_t *len /* OUT */);

/* A few words for a status, for "FILE: why" messages: "not a regular file (a FIFO, device or
 * folder)", ... Never NULL. INFILE_TOOBIG's words do not say the limit: the caller does. */
const char *infile_reason(InfileStatus s);

#endif
