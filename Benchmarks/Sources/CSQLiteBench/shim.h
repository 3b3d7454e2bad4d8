#ifndef RTSYNC_BENCH_CSQLITE_SHIM_H
#define RTSYNC_BENCH_CSQLITE_SHIM_H
// The session extension's declarations are guarded by these macros; the system libsqlite3 is built with them.
#define SQLITE_ENABLE_SESSION 1
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <sqlite3.h>

// SQLITE_TRANSIENT is a macro casting -1 to a function pointer; Swift can't import it.
static inline sqlite3_destructor_type bench_transient(void) { return SQLITE_TRANSIENT; }

// sqlite3changeset_apply's conflict callback: replace on data/conflict, omit otherwise (baseline "apply everything").
static inline int bench_conflict_replace(void *ctx, int eConflict, sqlite3_changeset_iter *it) {
    (void)ctx; (void)it;
    if (eConflict == SQLITE_CHANGESET_DATA || eConflict == SQLITE_CHANGESET_CONFLICT) return SQLITE_CHANGESET_REPLACE;
    return SQLITE_CHANGESET_OMIT;
}
static inline int bench_changeset_apply(sqlite3 *db, int n, void *p) {
    return sqlite3changeset_apply(db, n, p, 0, bench_conflict_replace, 0);
}
#endif
