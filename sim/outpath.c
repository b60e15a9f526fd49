/* outpath.c: checked output paths and their temporaries (outpath.h). */
#include "outpath.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

VrStatus outpath_check_file(const char *path, const char *opt, const char *const *inputs,
                            const char *header, char *err, size_t errlen) {
    struct stat st;
    if (lstat(path, &st) != 0) return VR_OK; /* absent (or unreachable: the create says why) */
    if (S_ISLNK(st.st_mode)) {
        snprintf(err, errlen, "%s %s: is a symbolic link: vrsim replaces only a regular file it "
                 "wrote (give the link's target, or another path)", opt, path);
        return VR_EINVAL;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s %s: exists and is not a regular file: refused", opt, path);
        return VR_EINVAL;
    }
    for (int i = 0; inputs && inputs[i]; i++) {
        struct stat in;
        if (stat(inputs[i], &in) == 0 && in.st_dev == st.st_dev && in.st_ino == st.st_ino) {
            snprintf(err, errlen, "%s %s: is %s, an input of this run: refused", opt, path,
                     inputs[i]);
            return VR_EINVAL;
        }
    }
    if (header && st.st_size > 0) {
        size_t n = strlen(header);
        char *got = malloc(n + 1);
        int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
        bool same = false;
        if (got && fd >= 0) {
            size_t k = 0;
            ssize_t r;
            while (k < n && (r = read(fd, got + k, n - k)) > 0) k += (size_t)r;
            same = k == n && memcmp(got, header, n) == 0;
        }
        if (fd >= 0) close(fd);
        free(got);
        if (!same) {
            snprintf(err, errlen, "%s %s: holds a file vrsim did not write there: give a new path "
                     "or remove it first", opt, path);
            return VR_EINVAL;
        }
    }
    return VR_OK;
}

/* path's folder (a new string, "." for a bare name) and its last component (borrowed). */
static char *split_path(const char *path, const char **base) {
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    if (!slash) return strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *dir = malloc(n + 1);
    if (dir) {
        memcpy(dir, path, n);
        dir[n] = 0;
    }
    return dir;
}

bool outpath_pid_alive(long pid) {
    if (pid <= 0 || pid == (long)getpid()) return true;
    return kill((pid_t)pid, 0) == 0 || errno != ESRCH;
}

/* The pid in a temporary's name after "BASE.tmp": "-<pid>-XXXXXX" or ".<pid>"; -1 when name is
 * not such a temporary of base. */
static long temp_pid(const char *name, const char *base) {
    size_t n = strlen(base);
    if (strncmp(name, base, n) != 0 || strncmp(name + n, ".tmp", 4) != 0) return -1;
    const char *p = name + n + 4;
    char sep = *p++;
    if (sep != '-' && sep != '.') return -1;
    char *end;
    errno = 0;
    long pid = strtol(p, &end, 10);
    if (end == p || errno || pid <= 0) return -1;
    if (sep == '.') return *end == 0 ? pid : -1;
    return *end == '-' && strlen(end + 1) == 6 ? pid : -1;
}

/* Unlinks every entry of folder dir but sub-folders, then removes dir (when that empties it). */
static void remove_folder(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        size_t dl = strlen(dir);
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char *p = malloc(dl + strlen(e->d_name) + 2);
            if (!p) continue;
            sprintf(p, "%s/%s", dir, e->d_name);
            struct stat st;
            if (lstat(p, &st) == 0 && !S_ISDIR(st.st_mode)) unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

void outpath_clean_stale(const char *path) {
    size_t L = strlen(path);
    char *trimmed = strdup(path);
    if (!trimmed) return;
    while (L > 1 && trimmed[L - 1] == '/') trimmed[--L] = 0;
    const char *base;
    char *dir = split_path(trimmed, &base);
    DIR *d = dir ? opendir(dir) : NULL;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            long pid = temp_pid(e->d_name, base);
            if (pid < 0 || outpath_pid_alive(pid)) continue;
            char *p = malloc(strlen(dir) + strlen(e->d_name) + 2);
            if (!p) continue;
            sprintf(p, "%s/%s", dir, e->d_name);
            struct stat st;
            if (lstat(p, &st) == 0) {
                if (S_ISDIR(st.st_mode)) remove_folder(p);
                else unlink(p);
            }
            free(p);
        }
        closedir(d);
    }
    free(dir);
    free(trimmed);
}

int outpath_temp_file(const char *path, char **tmp) {
    *tmp = NULL;
    outpath_clean_stale(path);
    size_t n = strlen(path) + 48;
    char *t = malloc(n);
    if (!t) { errno = ENOMEM; return -1; }
    snprintf(t, n, "%s.tmp-%ld-XXXXXX", path, (long)getpid());
    int fd = mkstemp(t);
    if (fd < 0) {
        int e = errno;
        free(t);
        errno = e;
        return -1;
    }
    mode_t um = umask(0); /* mkstemp makes it 0600: give it what open(..., 0666) would */
    umask(um);
    fchmod(fd, 0666 & ~um);
    *tmp = t;
    return fd;
}

VrStatus outpath_commit_file(const char *tmp, const char *path, const char *opt,
                             const char *const *inputs, const char *header, char *err,
                             size_t errlen) {
    VrStatus st = outpath_check_file(path, opt, inputs, header, err, errlen);
    if (st) {
        unlink(tmp);
        return st;
    }
    if (rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s %s: %s", opt, path, strerror(errno));
        unlink(tmp);
        return VR_EIO;
    }
    return VR_OK;
}
