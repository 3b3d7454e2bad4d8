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

/// Copies what is left of `in` into `out` with read/write in 1 MiB blocks. Returns 0 or an errno value.
static int copy_by_reading(int in, int out) {
    enum { block = 1 << 20 };
    char *buffer = malloc(block);
    if (buffer == NULL) return ENOMEM;
    int e = 0;
    for (;;) {
        ssize_t n = read(in, buffer, block);
        if (n < 0) { if (errno == EINTR) continue; e = errno; break; }
        if (n == 0) break;
        for (ssize_t done = 0; done < n;) {
            ssize_t w = write(out, buffer + done, (size_t)(n - done));
            if (w < 0) { if (errno == EINTR) continue; e = errno; break; }
            done += w;
        }
        if (e != 0) break;
    }
    free(buffer);
    return e;
}

int rtsync_copy_file(const char *src, const char *dst) {
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) return errno;
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) { int e = errno; close(in); return e; }
    int e = 0;
#if defined(__linux__)
    int copied_any = 0;
    for (;;) {
        ssize_t n = copy_file_range(in, NULL, out, NULL, (size_t)1 << 30, 0);
        if (n > 0) { copied_any = 1; continue; }
        if (n == 0) break;
        if (errno == EINTR) continue;
        // Kernels or filesystems without it, across filesystems on older kernels, or blocked by a container's
        // syscall filter (EPERM): copy by reading.
        if (!copied_any && (errno == ENOSYS || errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP || errno == EBADF || errno == EPERM || errno == ETXTBSY)) {
            e = copy_by_reading(in, out);
        } else {
            e = errno;
        }
        break;
    }
#else
    e = copy_by_reading(in, out);
#endif
    close(in);
    if (close(out) != 0 && e == 0) e = errno;
    if (e != 0) unlink(dst);
    return e;
}

int rtsync_copy_open_file(int src_fd, const char *dst) {
    if (src_fd < 0) return EBADF;
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) return errno;
    int e = 0;
    off_t offset = 0;
#if defined(__linux__)
    for (;;) {
        loff_t in_offset = offset;
        ssize_t n = copy_file_range(src_fd, &in_offset, out, NULL, (size_t)1 << 30, 0);
        if (n > 0) { offset += n; continue; }
        if (n == 0) break;
        if (errno == EINTR) continue;
        if (offset == 0 && (errno == ENOSYS || errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP || errno == EBADF || errno == EPERM || errno == ETXTBSY)) {
            e = -1;  // copy by reading below
        } else {
            e = errno;
        }
        break;
    }
    if (e == -1) {
        e = 0;
#endif
        // pread at explicit offsets: the descriptor's file position (which its owner may use) is left alone.
        enum { block = 1 << 20 };
        char *buffer = malloc(block);
        if (buffer == NULL) e = ENOMEM;
        while (e == 0) {
            ssize_t n = pread(src_fd, buffer, block, offset);
            if (n < 0) { if (errno == EINTR) continue; e = errno; break; }
            if (n == 0) break;
            for (ssize_t done = 0; done < n;) {
                ssize_t w = write(out, buffer + done, (size_t)(n - done));
                if (w < 0) { if (errno == EINTR) continue; e = errno; break; }
                done += w;
            }
            offset += n;
        }
        free(buffer);
#if defined(__linux__)
    }
#endif
    if (close(out) != 0 && e == 0) e = errno;
    if (e != 0) unlink(dst);
    return e;
}
