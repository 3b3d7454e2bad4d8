#ifndef RTSYNC_CSQLITE_SHIM_H
#define RTSYNC_CSQLITE_SHIM_H
#include <sqlite3.h>

// Swift cannot call C variadic functions; these wrap the few we need.
static inline int rtsync_db_config_int(sqlite3 *db, int op, int value) {
    int out = 0;
    return sqlite3_db_config(db, op, value, &out);
}

// Reads a flag option without changing it (a negative value leaves it as it is).
static inline int rtsync_db_config_query(sqlite3 *db, int op, int *out) {
    return sqlite3_db_config(db, op, -1, out);
}

// Turns off SQLite's global memory statistics, whose mutex is taken on every allocation. Must run
// before SQLite initializes; afterwards it returns SQLITE_MISUSE and changes nothing.
static inline int rtsync_disable_memstatus(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

// SQLITE_TRANSIENT is a macro casting -1 to a function pointer; Swift can't import it.
static inline sqlite3_destructor_type rtsync_transient(void) {
    return SQLITE_TRANSIENT;
}

// The descriptor a unix-family VFS keeps for an open file. os_unix.c's unixFile starts with the io methods,
// the VFS and the inode info pointers, then `int h`. Only for files of a "unix*" VFS, and the caller must
// check (fstat) that the number is an open descriptor of the expected file before using it.
static inline int rtsync_unix_file_descriptor(sqlite3_file *file) {
    return *(const int *)((const char *)file + 3 * sizeof(void *));
}
#endif
