/* capture_probe: thread CPU time of the capture suite's writes (100k inserts, then 100k updates of three
 * columns, each in one transaction with one prepared statement, WAL, synchronous=NORMAL) against a copy of a
 * template database, so trigger sets can be compared without the Swift harness.
 *
 *   cc -O2 -o capture_probe capture_probe.c -lsqlite3
 *   ./capture_probe TEMPLATE.sqlite [RUNS]      (TEMPLATE holds an empty `items` table, tracked or not)
 *
 * Prints the median and minimum CPU milliseconds of each phase. Keys, values and their order follow
 * Benchmarks/Sources/rtsync-bench/Dataset.swift in shape (sorted 7-digit prefix + 20 letters), not byte for byte.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N 100000

static unsigned long long st = 0xC0FFEE;
static unsigned long long next(void) {
    st += 0x9E3779B97F4A7C15ULL;
    unsigned long long z = st;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static void word(char *out, int n) { for (int i = 0; i < n; i++) out[i] = 'a' + next() % 26; out[n] = 0; }
static double cpu_ms(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static void check(int rc, sqlite3 *db, const char *what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) { fprintf(stderr, "%s: %s\n", what, sqlite3_errmsg(db)); exit(1); }
}
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

static char keys[N][32], names[N][24], notes[N][48], unotes[N][48];
static long long qty[N], uqty[N]; static double price[N];

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s TEMPLATE.sqlite [RUNS]\n", argv[0]); return 2; }
    int runs = argc > 2 ? atoi(argv[2]) : 7;
    for (int i = 0; i < N; i++) {
        char w[24]; word(w, 20); snprintf(keys[i], 32, "%07d%s", i, w);
        char a[16], b[16]; word(a, 12); word(b, 8); snprintf(names[i], 24, "%s %s", a, b);
        qty[i] = next() % 1000; price[i] = (double)(next() % 100000) / 100; word(notes[i], 40);
    }
    for (int i = 0; i < N; i++) { uqty[i] = next() % 1000; word(unotes[i], 40); }
    double ins[64], upd[64];
    char path[4096]; snprintf(path, sizeof path, "/tmp/capture_probe_%d.sqlite", (int)getpid());
    for (int r = 0; r < runs && r < 64; r++) {
        char cmd[9000]; snprintf(cmd, sizeof cmd, "rm -f %s %s-wal %s-shm && cp %s %s", path, path, path, argv[1], path);
        if (system(cmd) != 0) return 1;
        sqlite3 *db; check(sqlite3_open(path, &db), db, "open");
        check(sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL", 0, 0, 0), db, "pragma");
        sqlite3_stmt *s;
        double t0 = cpu_ms();
        check(sqlite3_exec(db, "BEGIN", 0, 0, 0), db, "begin");
        check(sqlite3_prepare_v2(db, "INSERT INTO items(id, name, qty, price, note, updated_at) VALUES (?, ?, ?, ?, ?, ?)", -1, &s, 0), db, "prepare");
        for (int i = 0; i < N; i++) {
            sqlite3_bind_text(s, 1, keys[i], -1, SQLITE_STATIC); sqlite3_bind_text(s, 2, names[i], -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 3, qty[i]); sqlite3_bind_double(s, 4, price[i]);
            sqlite3_bind_text(s, 5, notes[i], -1, SQLITE_STATIC); sqlite3_bind_int64(s, 6, 1700000000LL + i);
            check(sqlite3_step(s), db, "insert"); sqlite3_reset(s);
        }
        sqlite3_finalize(s);
        check(sqlite3_exec(db, "COMMIT", 0, 0, 0), db, "commit");
        double t1 = cpu_ms();
        check(sqlite3_exec(db, "BEGIN", 0, 0, 0), db, "begin");
        check(sqlite3_prepare_v2(db, "UPDATE items SET qty = ?, note = ?, updated_at = ? WHERE id = ?", -1, &s, 0), db, "prepare");
        for (int i = 0; i < N; i++) {
            sqlite3_bind_int64(s, 1, uqty[i]); sqlite3_bind_text(s, 2, unotes[i], -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 3, 1800000000LL + i); sqlite3_bind_text(s, 4, keys[i], -1, SQLITE_STATIC);
            check(sqlite3_step(s), db, "update"); sqlite3_reset(s);
        }
        sqlite3_finalize(s);
        check(sqlite3_exec(db, "COMMIT", 0, 0, 0), db, "commit");
        double t2 = cpu_ms();
        ins[r] = t1 - t0; upd[r] = t2 - t1;
        sqlite3_close(db);
    }
    snprintf(path + strlen(path), 8, "%s", ""); 
    char cmd[9000]; snprintf(cmd, sizeof cmd, "rm -f %s %s-wal %s-shm", path, path, path); (void)!system(cmd);
    qsort(ins, runs, sizeof(double), cmp); qsort(upd, runs, sizeof(double), cmp);
    printf("inserts cpu median %.1f ms (min %.1f)  updates cpu median %.1f ms (min %.1f)\n", ins[runs / 2], ins[0], upd[runs / 2], upd[0]);
    return 0;
}
