#include "rtsync_clone.h"
#include <errno.h>
#include <fcntl.h>
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
