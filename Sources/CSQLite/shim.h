#ifndef RTSYNC_CSQLITE_SHIM_H
#define RTSYNC_CSQLITE_SHIM_H
#include <sqlite3.h>

// Swift cannot call C variadic functions; these wrap the few we need.
static inline int rtsync_db_config_int(sqlite3 *db, int op, int value) {
    int out = 0;
    return sqlite3_db_config(db, op, value, &out);
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
#endif
