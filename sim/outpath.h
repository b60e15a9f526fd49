/* outpath.h: how vrsim creates what it writes outside a run's output set: a single file
 * (--alloc-trace, sweep.csv, sweep.json, the sweep journal) is written to a temporary of this
 * process beside it and renamed over it, and only where the path is absent or holds a regular
 * file that vrsim wrote: never over a symbolic link, a device, a FIFO, a folder or one of the
 * run's own inputs (the scenario, a config it read).
 *
 * Temporaries. A temporary beside PATH is named "PATH.tmp-<pid>-XXXXXX" (mkstemp, mkdtemp) or
 * "PATH.tmp.<pid>", so that one left by a process that was killed (SIGKILL runs no cleanup) can
 * be told from one still being written: outpath_clean_stale removes those of processes that no
 * longer run on this machine, and every writer calls it before it writes. */
#ifndef VR_OUTPATH_H
#define VR_OUTPATH_H

#include <stddef.h>

#include "vr.h"

/* Whether path may be replaced by a file vrsim writes: absent, or a regular file (not a link)
 * that is none of inputs (NULL-terminated list of paths, NULL: none; compared by device and
 * inode) and, with header non-NULL, is empty or starts with header (what vrsim writes there).
 * VR_OK, or VR_EINVAL with a message naming opt (the option, e.g. "--alloc-trace") in err. */
VrStatus outpath_check_file(const char *path, const char *opt, const char *const *inputs,
                            const char *header, char *err, size_t errlen);

/* Creates a temporary file beside path ("PATH.tmp-<pid>-XXXXXX", mode 0666 less the umask)
 * after outpath_clean_stale(path). Returns its descriptor and its name in *tmp (the caller frees
 * it), or -1 with errno set and *tmp NULL. */
int outpath_temp_file(const char *path, char **tmp /* OUT */);

/* Renames tmp over path after outpath_check_file(path, ...) holds once more. On failure tmp is
 * removed and err says why (VR_EINVAL: the path became something vrsim does not replace, VR_EIO:
 * the rename failed). */
VrStatus outpath_commit_file(const char *tmp, const char *path, const char *opt,
                             const char *const *inputs, const char *header, char *err,
                             size_t errlen);

/* Removes the temporaries beside path (both name forms above) whose process is gone: a file is
 * unlinked; a folder loses the files in it and is removed when that empties it. Quiet: what it
 * cannot remove stays. */
void outpath_clean_stale(const char *path);

/* Whether the process pid still runs on this machine (true when that cannot be told). */
bool outpath_pid_alive(long pid);

#endif
