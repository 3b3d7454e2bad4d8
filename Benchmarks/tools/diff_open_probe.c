/* diff_open_probe: what SQLite alone charges to open and check one small diff file, statement by statement, as
 * DiffReader does (immutable read-only URI, hardening pragmas, quick_check, the schema, metadata, table
 * definitions, the carried table's columns, the row counts, the rows), then close it. It is the floor of a
 * catch-up that applies N one-row diffs: every diff file is opened and checked once, whatever the Swift side does.
 *
 *   cc -O2 -o diff_open_probe diff_open_probe.c -lsqlite3
 *   ./diff_open_probe DIFF.sqlite [TABLE] [RUNS]   (DIFF: an expanded diff file, e.g. from a home's outbox;
 *                                                   TABLE: its carried table, default items; RUNS default 300)
 *
 * Prints the mean wall microseconds of each step over RUNS opens of the same file (the file stays in the page
 * cache, as a just-downloaded diff does).
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s DIFF.sqlite [TABLE] [RUNS]\n", argv[0]); return 2; }
    const char *table = argc > 2 ? argv[2] : "items";
    int runs = argc > 3 ? atoi(argv[3]) : 300;
    char uri[4096], tableInfo[512], count[512];
    snprintf(uri, sizeof uri, "file:%s?mode=ro&immutable=1", argv[1]);
    snprintf(tableInfo, sizeof tableInfo, "PRAGMA table_info(\"%s\")", table);
    snprintf(count, sizeof count, "SELECT count(*) FROM \"%s\" NOT INDEXED", table);
    const char *steps[] = {
        "PRAGMA trusted_schema = OFF; PRAGMA cell_size_check = ON; PRAGMA mmap_size = 0",
        "PRAGMA quick_check(20)",
        "SELECT type, name FROM sqlite_schema",
        "SELECT format_version, diff_id, kind, author_user, author_site, seq_first, seq_last, created_at, seen, digest, "
        "signature, signer_key FROM rtsync_meta NOT INDEXED LIMIT 2",
        "SELECT id, name, columns, constraints, schema_hash FROM rtsync_tables NOT INDEXED ORDER BY id",
        tableInfo,
        "SELECT tid, count(*), sum(op = 'delete') FROM rtsync_rows NOT INDEXED GROUP BY tid",
        count,
        "SELECT * FROM rtsync_rows NOT INDEXED ORDER BY rowid",
    };
    enum { STEPS = sizeof steps / sizeof steps[0] };
    double spent[STEPS] = {0}, open = 0, close = 0;
    for (int r = 0; r < runs; r++) {
        sqlite3 *db;
        double t = now_us();
        if (sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, 0) != SQLITE_OK) {
            fprintf(stderr, "cannot open %s\n", argv[1]);
            return 1;
        }
        sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, 0);
        sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, 0);
        sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_VIEW, 0, 0);
        open += now_us() - t;
        for (int i = 0; i < STEPS; i++) {
            t = now_us();
            const char *tail = steps[i];
            while (tail && *tail) {
                sqlite3_stmt *st = 0;
                if (sqlite3_prepare_v2(db, tail, -1, &st, &tail) != SQLITE_OK) {
                    fprintf(stderr, "%s: %s\n", steps[i], sqlite3_errmsg(db));
                    return 1;
                }
                if (!st) break;
                while (sqlite3_step(st) == SQLITE_ROW) {}
                sqlite3_finalize(st);
            }
            spent[i] += now_us() - t;
        }
        t = now_us();
        sqlite3_close(db);
        close += now_us() - t;
    }
    double total = open + close;
    printf("%8.1f us  open (and the defensive settings)\n", open / runs);
    for (int i = 0; i < STEPS; i++) { printf("%8.1f us  %.70s\n", spent[i] / runs, steps[i]); total += spent[i]; }
    printf("%8.1f us  close\n%8.1f us  in all, per diff file\n", close / runs, total / runs);
    return 0;
}
