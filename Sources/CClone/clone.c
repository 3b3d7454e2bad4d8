#if defined(__linux__)
#define _GNU_SOURCE
#endif
#include "rtsync_clone.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/ioctl.h>
#include <linux/fs.h>
#elif defined(__APPLE__)
#include <sys/clonefile.h>
#endif

int rtsync_clone_file(const char *src, const char *dst) {
#if defined(__linux__)
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) return errno;
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) { int e = errno; close(in); return e; }
    int rc = ioctl(out, FICLONE, in);
    int e = rc == 0 ? 0 : errno;
    if (rc == 0 && fsync(out) != 0) e = errno;
    close(in);
    close(out);
    if (e != 0) unlink(dst);
    return e;
#elif defined(__APPLE__)
    return clonefile(src, dst, 0) == 0 ? 0 : errno;
#else
    return ENOTSUP;
#endif
}

int rtsync_clone_open_file(int src_fd, const char *src, const char *dst) {
#if defined(__linux__)
    (void)src;
    if (src_fd < 0) return ENOTSUP;
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) return errno;
    int rc = ioctl(out, FICLONE, src_fd);
    int e = rc == 0 ? 0 : errno;
    if (rc == 0 && fsync(out) != 0) e = errno;
    close(out);
    if (e != 0) unlink(dst);
    return e;
#elif defined(__APPLE__)
    (void)src_fd;
    return clonefile(src, dst, 0) == 0 ? 0 : errno;
#else
    (void)src_fd; (void)src; (void)dst;
    return ENOTSUP;
#endif
}

/// Copies `in` from `offset` to its end into `out` with pread/write in 1 MiB blocks (pread leaves the
/// descriptor's file position alone). Returns 0 or an errno value.
static int copy_by_reading(int in, int out, off_t offset) {
    enum { block = 1 << 20 };
    char *buffer = malloc(block);
    if (buffer == NULL) return ENOMEM;
    int e = 0;
    for (;;) {
        ssize_t n = pread(in, buffer, block, offset);
        if (n < 0) { if (errno == EINTR) continue; e = errno; break; }
        if (n == 0) break;
        for (ssize_t done = 0; done < n;) {
            ssize_t w = write(out, buffer + done, (size_t)(n - done));
            if (w < 0) { if (errno == EINTR) continue; e = errno; break; }
            done += w;
        }
        if (e != 0) break;
        offset += n;
    }
    free(buffer);
    return e;
}

int rtsync_copy_open_file(int src_fd, const char *dst) {
    if (src_fd < 0) return EBADF;
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) return errno;
    int e = 0;
#if defined(__linux__)
    loff_t offset = 0;
    for (;;) {
        // An explicit input offset: the descriptor's file position (which its owner may use) is left alone.
        ssize_t n = copy_file_range(src_fd, &offset, out, NULL, (size_t)1 << 30, 0);
        if (n > 0) continue;
        if (n == 0) break;
        if (errno == EINTR) continue;
        // Kernels or filesystems without it, across filesystems on older kernels, or blocked by a container's
        // syscall filter (EPERM): copy by reading.
        if (offset == 0 && (errno == ENOSYS || errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP || errno == EBADF || errno == EPERM || errno == ETXTBSY)) {
            e = copy_by_reading(src_fd, out, 0);
        } else {
            e = errno;
        }
        break;
    }
#else
    e = copy_by_reading(src_fd, out, 0);
#endif
    if (close(out) != 0 && e == 0) e = errno;
    if (e != 0) unlink(dst);
    return e;
}

int rtsync_copy_file(const char *src, const char *dst) {
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) return errno;
    int e = rtsync_copy_open_file(in, dst);
    close(in);
    return e;
}
