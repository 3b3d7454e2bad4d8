#ifndef RTSYNC_CLONE_H
#define RTSYNC_CLONE_H
/// Makes `dst` a copy-on-write clone of `src` (FICLONE on Linux btrfs/XFS, clonefile on APFS).
/// Returns 0 on success, or an errno value (EOPNOTSUPP/EXDEV/ENOTSUP when the filesystem cannot clone).
/// `dst` must not exist.
int rtsync_clone_file(const char *src, const char *dst);
#endif
