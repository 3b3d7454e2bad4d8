#ifndef RTSYNC_CLONE_H
#define RTSYNC_CLONE_H
/// Makes `dst` a copy-on-write clone of `src` (FICLONE on Linux btrfs/XFS, clonefile on APFS).
/// Returns 0 on success, or an errno value (EOPNOTSUPP/EXDEV/ENOTSUP when the filesystem cannot clone).
/// `dst` must not exist.
int rtsync_clone_file(const char *src, const char *dst);

/// Clones a file this process already has open (and may hold POSIX locks on) without opening it again: on
/// Linux FICLONE from `src_fd` (ENOTSUP when it is -1), on Apple platforms clonefile of the path `src`, which
/// opens no descriptor. Closing any descriptor of a file releases all of the process's locks on it, which is
/// why SQLite's own descriptor is used for a live database. Returns 0 or an errno value.
int rtsync_clone_open_file(int src_fd, const char *src, const char *dst);

/// Copies `src` into a new file `dst` byte for byte until end of file: in the kernel with copy_file_range on
/// Linux (no data passes through this process), else with read/write. Returns 0 or an errno value; on failure
/// `dst` is removed. `dst` must not exist. Nothing is synced: the caller decides when the copy must be durable.
int rtsync_copy_file(const char *src, const char *dst);

/// Copies a file this process already has open into a new file `dst` without opening the source again (see
/// rtsync_clone_open_file): copy_file_range from `src_fd` at explicit offsets on Linux, else pread/write.
/// The descriptor's file position is not changed. Returns 0 or an errno value; on failure `dst` is removed.
int rtsync_copy_open_file(int src_fd, const char *dst);
#endif
