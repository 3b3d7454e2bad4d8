#!/usr/bin/env python3
"""Structured fuzzer for rtsync diff files (hostile input).

Builds two (three) devices of one user that share rows, makes real diffs on device A with the real `rtsync`
binary (small and large, new rows / updates / deletes, one- and several-column keys), mutates copies of them
with structured mutations (values, keys, clocks, metadata, `changed` lists, definitions, schema objects, pages,
headers, transport encoding, names), re-seals the digest where the mutation is meant to pass the reader,
and applies each to copies of the recipients through `rtsync diff apply` (and `rtsync sync` with the file in
the bucket's inbound folder). It checks crash / hang / clarity of errors / integrity / unchanged-on-reject /
canary / next good diff still applies / same result on two recipients and on the per-row and bulk paths.

Usage (from the worktree, after `swift build`):
  python3 tools/fuzz/diff_fuzz.py --seed 1 --iterations 200 [--minutes M] [--sync-every 8] [--only MUTATION,...]
      [--rtsync .build/debug/rtsync] [--work DIR] [--keep] [--third-sync] [--only-iteration N]
  Environment: FUZZ_FK=1 adds tables with foreign keys (CASCADE / SET NULL / NO ACTION) to the devices and diffs;
  FUZZ_SKIP_KNOWN=1 leaves out the `changed` mutation that reproduces finding 03; FUZZ_FIFO=1 lets file_kind put a
  FIFO in place of the diff (finding 01: each such iteration waits for the 120 s timeout).
Every iteration is replayable: `--seed S --only-iteration N` (the same setup, mutation and recipient). Findings
(mutated file + description + replay line) go to tools/fuzz/findings/<seed>-<iteration>-<mutation>-<kind>/ (at
most 3 per kind and mutation); the run ends with a summary (mutations, statuses, findings), exit 1 if any.
Oracles per iteration: no crash (signal / exit >= 128) or hang (timeouts); a rejection names the file and leaves the
database byte-for-byte as it was (bookkeeping included); integrity_check ok; canary table empty; the diff file is
not modified; the good diff applies afterwards; `diff inspect` accepts what apply accepted; `conflicts list` does
not crash; the same outcome and database (app tables, bookkeeping, conflict log) on the per-row merge (an app
trigger in the recipient), the bulk paths (the diff padded past 64 KiB with an unknown structure-table column,
which the digest does not cover), a group of small diffs, and a second recipient; "harmless" mutations give the
untouched diff's result; every --sync-every'th iteration also goes through `rtsync sync` with the object in the
bucket's inbound folder (and `rtsync status` afterwards).
Standard library only.
"""
import argparse, hashlib, json, os, random, shutil, sqlite3, struct, subprocess, sys, tempfile, time, zlib, traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
TIMEOUT = 120

# ----------------------------------------------------------------------------------------------------------------
# canonical encoding, digest, schema hash (docs/diff-format.md sections 8, 9, 15.1)

def enc(t, v):
    if t == "null": return b"\x00"
    if t == "integer": return b"\x01" + struct.pack(">q", v)
    if t == "real": return b"\x02" + struct.pack(">d", v)
    if t == "text": return b"\x03" + struct.pack(">Q", len(v)) + v
    if t == "blob": return b"\x04" + struct.pack(">Q", len(v)) + v
    raise ValueError(t)

def qi(name):
    return '"' + name.replace('"', '""') + '"'

def typed_row(con, sql, n, args=()):
    """Rows of `sql`, whose select list is c1, typeof(c1), c2, typeof(c2) ...: as lists of (type, value)."""
    out = []
    for r in con.execute(sql, args):
        out.append([(r[2 * i + 1].decode() if isinstance(r[2 * i + 1], bytes) else r[2 * i + 1], r[2 * i]) for i in range(n)])
    return out

def sel(cols, prefix=""):
    return ", ".join("%s%s, typeof(%s%s)" % (prefix, c, prefix, c) for c in cols)

def rowid_alias(colnames):
    low = {c.lower() for c in colnames}
    for a in ("rowid", "_rowid_", "oid"):
        if a not in low: return a
    return None

def schema_hash(name, columns):
    s = "rtsync-schema-v1\n" + name.lower() + "\n"
    for c in columns:
        s += c["name"].lower() + "\t" + c.get("type", "").upper() + "\t" + str(c.get("primaryKey", 0)) + "\n"
    return hashlib.sha256(s.encode("utf-8")).hexdigest()

def compute_digest(con):
    con.text_factory = bytes
    try:
        meta = typed_row(con, "SELECT " + sel(["diff_id", "kind", "author_user", "author_site", "seq_first", "seq_last", "created_at", "seen"]) + " FROM rtsync_meta", 8)[0]
        M = b"".join(enc(t, v) for t, v in meta)
        T = hashlib.sha256()
        defs = {}
        for row in typed_row(con, "SELECT " + sel(["id", "name", "columns", "constraints", "schema_hash"]) + " FROM rtsync_tables ORDER BY id", 5):
            T.update(b"".join(enc(t, v) for t, v in row))
            tid = row[0][1]; name = row[1][1].decode("utf-8", "replace")
            cols = [c["name"] for c in json.loads(row[2][1].decode("utf-8", "replace"))]
            defs[tid] = (name, cols)
        R = hashlib.sha256()
        for row in typed_row(con, "SELECT " + sel(["tid", "rid", "op", "born", "born_site", "hlc", "site", "changed"]) + " FROM rtsync_rows ORDER BY rowid", 8):
            R.update(b"".join(enc(t, v) for t, v in row))
            tid = row[0][1]; rid = row[1][1]
            if tid in defs:
                name, cols = defs[tid]
                alias = rowid_alias(cols)
                vals = typed_row(con, "SELECT " + sel([qi(c) for c in cols]) + " FROM %s WHERE %s = ?" % (qi(name), alias), len(cols), (rid,))
                if vals:
                    R.update(b"".join(enc(t, v) for t, v in vals[0]))
        C = hashlib.sha256()
        if con.execute("SELECT 1 FROM sqlite_master WHERE name='rtsync_cells'").fetchone():
            for row in typed_row(con, "SELECT " + sel(["tid", "rid", "col", "hlc", "site"]) + " FROM rtsync_cells ORDER BY rowid", 5):
                C.update(b"".join(enc(t, v) for t, v in row))
        return hashlib.sha256(b"rtsync-diff-v1" + M + T.digest() + R.digest() + C.digest()).hexdigest()
    finally:
        con.text_factory = str

def reseal(path, fix_schema_hash=True):
    con = sqlite3.connect(path, isolation_level=None)
    try:
        if fix_schema_hash:
            for tid, name, cols in con.execute("SELECT id, name, columns FROM rtsync_tables").fetchall():
                try:
                    c = json.loads(cols)
                    con.execute("UPDATE rtsync_tables SET schema_hash = ? WHERE id = ?", (schema_hash(name, c), tid))
                except Exception:
                    pass
        d = compute_digest(con)
        con.execute("UPDATE rtsync_meta SET digest = ?, signature = NULL, signer_key = NULL", (d,))
    finally:
        con.close()

# ----------------------------------------------------------------------------------------------------------------
# KSUID

ALPH = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

def ksuid_from_bytes(b):
    n = int.from_bytes(b, "big"); s = ""
    while n: n, r = divmod(n, 62); s = ALPH[r] + s
    return s.rjust(27, "0")

def ksuid_new(rng, ts=None):
    if ts is None: ts = int(time.time()) - 1400000000
    return ksuid_from_bytes(struct.pack(">I", ts & 0xFFFFFFFF) + bytes(rng.getrandbits(8) for _ in range(16)))

# ----------------------------------------------------------------------------------------------------------------
# databases

SCHEMA = """
CREATE TABLE items(id TEXT PRIMARY KEY NOT NULL, title TEXT, n INTEGER, r REAL, b BLOB, note TEXT);
CREATE TABLE pairs(a TEXT NOT NULL, b INTEGER NOT NULL, v TEXT, w INTEGER DEFAULT 0, PRIMARY KEY(a, b));
CREATE TABLE nums(id INTEGER PRIMARY KEY, val TEXT, qty INTEGER NOT NULL DEFAULT 0);
CREATE TABLE big(id TEXT PRIMARY KEY NOT NULL, payload TEXT, k INTEGER, u TEXT UNIQUE);
CREATE TABLE wr(k TEXT NOT NULL, j INTEGER NOT NULL, x TEXT, PRIMARY KEY(k, j)) WITHOUT ROWID;
CREATE TABLE followup(id TEXT PRIMARY KEY NOT NULL, v TEXT);
CREATE TABLE hold(id TEXT PRIMARY KEY NOT NULL, must TEXT NOT NULL, opt TEXT, n INTEGER);
CREATE TABLE canary(x);
"""
LOCAL_EDITS = """
UPDATE items SET title = 'local ' || id, note = 'L' WHERE id IN ('it001', 'it004', 'it005', 'it010', 'it020');
DELETE FROM items WHERE id IN ('it002', 'it030');
INSERT INTO items VALUES ('new1', 'local new1', 1, 1.0, x'02', 'L');
UPDATE pairs SET w = 99 WHERE a = 'p1';
UPDATE big SET payload = 'local', k = -5 WHERE k % 10 = 0;
DELETE FROM big WHERE k % 97 = 1;
INSERT INTO big VALUES ('nb00003', 'local new', 3, 'lu3');
UPDATE wr SET x = 'lw' WHERE j IN (1, 2, 10);
UPDATE nums SET val = 'lv' WHERE id = 1000;
"""
NOOP_TRIGGER = "CREATE TRIGGER noop_app_trigger AFTER INSERT ON canary BEGIN SELECT 1; END;"
# FUZZ_FK=1: also tables with foreign keys (ON DELETE CASCADE / SET NULL / RESTRICT), for the delete actions.
FK_SCHEMA = """
CREATE TABLE parent(id TEXT PRIMARY KEY NOT NULL, name TEXT);
CREATE TABLE child(id TEXT PRIMARY KEY NOT NULL, pid TEXT REFERENCES parent(id) ON DELETE CASCADE, v TEXT);
CREATE TABLE soft(id TEXT PRIMARY KEY NOT NULL, pid TEXT REFERENCES parent(id) ON DELETE SET NULL, v TEXT);
CREATE TABLE strict(id TEXT PRIMARY KEY NOT NULL, pid TEXT NOT NULL REFERENCES parent(id), v TEXT);
"""
FK_ROWS = """
INSERT INTO parent SELECT 'P' || value, 'parent ' || value FROM generate_series(0, 19);
"""
FK_EDITS = """
DELETE FROM parent WHERE id IN ('P1', 'P2');
INSERT INTO parent VALUES ('Pnew', 'new parent');
INSERT INTO child VALUES ('cn1', 'Pnew', 'x'), ('cn2', 'P5', 'y');
UPDATE child SET v = 'moved', pid = 'P6' WHERE id = 'c3';
UPDATE soft SET v = 'sv' WHERE id = 's4';
INSERT INTO strict VALUES ('tn', 'P7', 'z');
DELETE FROM strict WHERE id = 't8';
"""
FK_LOCAL = """
INSERT INTO child VALUES ('cl', 'P1', 'local child of a parent the diff deletes');
INSERT INTO strict VALUES ('tl', 'P2', 'local strict child');
UPDATE soft SET pid = 'P1' WHERE id = 's9';
"""
APP_TABLES = ["items", "pairs", "nums", "big", "wr", "followup", "canary"]

def dump(path, include_bookkeeping=True):
    """Every table's rows (typed, sorted): a dict name -> list."""
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    con.text_factory = bytes
    out = {}
    try:
        names = [r[0].decode() for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        for n in names:
            if n.startswith("sqlite_"): continue
            if not include_bookkeeping and n.startswith("rtsync_"): continue
            cols = [r[1].decode() for r in con.execute("PRAGMA table_info(%s)" % qi(n))]
            rows = []
            for r in con.execute("SELECT %s FROM %s" % (sel([qi(c) for c in cols]), qi(n))):
                row = []
                for i in range(len(cols)):
                    v, t = r[2 * i], r[2 * i + 1]
                    if isinstance(v, float): v = struct.pack(">d", v).hex()
                    elif isinstance(v, bytes): v = v.hex()
                    row.append((t.decode() if isinstance(t, bytes) else t, v))
                rows.append(tuple(row))
            rows.sort(key=repr)
            out[n] = (tuple(cols), rows)
        out["__schema__"] = sorted((r[0].decode(), (r[1] or b"").decode("utf-8", "replace")) for r in con.execute("SELECT name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_autoindex%'"))
    finally:
        con.close()
    return out

def app_view(d):
    return {k: v for k, v in d.items() if not k.startswith("rtsync_") and k != "__schema__"}

def schema_view(d):
    return [x for x in d["__schema__"] if not x[0].startswith("rtsync_") and x[0] != "noop_app_trigger"]

BOOK = ["rtsync_clocks", "rtsync_rows", "rtsync_seen", "rtsync_changes", "rtsync_conflicts", "rtsync_aside", "rtsync_held", "rtsync_held_cells"]
def book_view(d):
    """Bookkeeping that must not depend on the merge path. A change the merge decides (a delete it makes) gets the
    wall clock of the moment: rtsync_changes.hlc and those decisions' clocks are left out."""
    out = {k: d[k] for k in BOOK if k in d and k not in ("rtsync_changes", "rtsync_conflicts", "rtsync_held", "rtsync_held_cells")}
    for k in ("rtsync_conflicts", "rtsync_held", "rtsync_held_cells"):
        if k in d:
            cols, rows = d[k]
            keep = [i for i, c in enumerate(cols) if c not in ("id", "at", "held_id", "received_at", "created_at")]
            out[k] = sorted(tuple(r[i] for i in keep) for r in rows)
    if "rtsync_changes" in d:
        cols, rows = d["rtsync_changes"]
        out["rtsync_changes"] = sorted((r[1], r[2], r[3], r[4]) for r in rows)
    return out

def diff_summary(a, b, limit=6):
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            if k == "__schema__":
                out.append("schema: %s vs %s" % (sorted(set(a[k]) - set(b.get(k, []))), sorted(set(b.get(k, [])) - set(a[k]))))
                continue
            ra = set(a.get(k, ((), []))[1]); rb = set(b.get(k, ((), []))[1])
            out.append("%s: cols %s/%s; only-left %s; only-right %s" % (k, a.get(k, ((),))[0], b.get(k, ((),))[0],
                                                              sorted(ra - rb, key=repr)[:3], sorted(rb - ra, key=repr)[:3]))
        if len(out) >= limit: break
    return "\n".join(out)

def integrity(path):
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    try:
        return [r[0] for r in con.execute("PRAGMA integrity_check")]
    finally:
        con.close()

# ----------------------------------------------------------------------------------------------------------------
# running rtsync

class Result:
    def __init__(self, rc, out, err, secs, timed_out=False):
        self.rc, self.out, self.err, self.secs, self.timed_out = rc, out, err, secs, timed_out
    def crashed(self):
        return self.timed_out or self.rc is None or self.rc < 0 or self.rc >= 128

def run(cmd, timeout=TIMEOUT, env=None):
    t = time.time()
    e = dict(os.environ); e.update(env or {}); e["RTSYNC_LOCK_WAIT"] = "5"
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, env=e)
        return Result(p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"), time.time() - t)
    except subprocess.TimeoutExpired as x:
        return Result(None, (x.stdout or b"").decode("utf-8", "replace"), (x.stderr or b"").decode("utf-8", "replace"), time.time() - t, True)

class Env:
    def __init__(self, rtsync, work, rng):
        self.rtsync, self.work, self.rng = rtsync, work, rng

    def rt(self, *args, timeout=TIMEOUT, check=True):
        r = run([self.rtsync] + list(args), timeout=timeout)
        if check and r.rc != 0:
            raise RuntimeError("rtsync %s failed (%s): %s %s" % (" ".join(args), r.rc, r.out[-2000:], r.err[-2000:]))
        return r

    def sql(self, path, script, args=None):
        con = sqlite3.connect(path, isolation_level=None, timeout=10)
        try:
            if args is None: con.executescript(script)
            else: con.executemany(script, args)
        finally:
            con.close()

    def setup(self):
        w = self.work
        self.bucket = os.path.join(w, "bucket")
        self.homes = {}
        for h in ("A", "B", "C"):
            home = os.path.join(w, h)
            os.makedirs(os.path.join(home, "support"), exist_ok=True)
            db = os.path.join(home, "support", "primary.sqlite")
            self.sql(db, SCHEMA + (FK_SCHEMA if os.environ.get("FUZZ_FK") else ""))
            self.homes[h] = home
        r = self.rt("init", "--home", self.homes["A"], "--bucket", self.bucket, "--json")
        self.user = json.loads(r.out)["userId"]
        for h in ("B", "C"):
            self.rt("init", "--home", self.homes[h], "--bucket", self.bucket, "--user", self.user, "--json")
        self.site = {h: json.loads(self.rt("status", "--home", self.homes[h], "--json").out)["siteId"] for h in self.homes}
        A = self.db("A")
        rng = self.rng
        # base rows every device will know
        self.sql(A, "INSERT INTO items VALUES (?,?,?,?,?,?)",
                 [("it%03d" % i, "title %d" % i, i, i / 3.0, bytes([i % 256]) * 3, None) for i in range(40)])
        self.sql(A, "INSERT INTO pairs VALUES (?,?,?,?)", [("p%d" % (i % 7), i, "v%d" % i, i * 2) for i in range(40)])
        self.sql(A, "INSERT INTO nums VALUES (?,?,?)", [(1000 + i * 7919, "n%d" % i, i) for i in range(30)])
        self.sql(A, "INSERT INTO wr VALUES (?,?,?)", [("w%d" % (i % 5), i, "x%d" % i) for i in range(30)])
        if os.environ.get("FUZZ_FK"):
            self.sql(A, "INSERT INTO parent VALUES (?, ?)", [("P%d" % i, "parent %d" % i) for i in range(20)])
            self.sql(A, "INSERT INTO child VALUES (?, ?, ?)", [("c%d" % i, "P%d" % (i % 10), "v") for i in range(20)])
            self.sql(A, "INSERT INTO soft VALUES (?, ?, ?)", [("s%d" % i, "P%d" % (i % 10), "v") for i in range(20)])
            self.sql(A, "INSERT INTO strict VALUES (?, ?, ?)", [("t%d" % i, "P%d" % (i % 10), "v") for i in range(20)])
        self.sql(A, "INSERT INTO hold VALUES (?,?,?,?)", [("h%02d" % i, "m%d" % i, None, i) for i in range(20)])
        self.sql(A, "INSERT INTO big VALUES (?,?,?,?)", [("bg%05d" % i, "payload-%d-" % i + "z" * 150, i, "u%d" % i) for i in range(1200)])
        self.rt("sync", "--home", self.homes["A"])
        for h in ("B", "C"):
            self.rt("sync", "--home", self.homes[h])
        self.rt("sync", "--home", self.homes["A"])
        for h in ("B", "C"):
            self.rt("sync", "--home", self.homes[h])
        # targets, made on A with `diff create`
        self.targets = {}
        out = os.path.join(w, "targets"); os.makedirs(out, exist_ok=True)
        def make(name, script):
            self.sql(A, script)
            r = self.rt("diff", "create", "--home", self.homes["A"], "--out", out, "--json")
            j = json.loads(r.out)
            path = j.get("path") or j.get("file")
            self.targets[name] = path
        make("small", """
            UPDATE items SET title = 'changed ' || id, n = n + 100 WHERE id IN ('it001','it002','it003');
            UPDATE items SET r = -1.5, b = x'00ff00' WHERE id = 'it004';
            DELETE FROM items WHERE id IN ('it005', 'it006');
            INSERT INTO items VALUES ('new1', 'fresh', 7, 2.5, x'01', 'nn'), ('new2', NULL, NULL, NULL, NULL, NULL);
            UPDATE pairs SET v = 'pv' WHERE a = 'p1';
            DELETE FROM pairs WHERE a = 'p2' AND b = 2;
            INSERT INTO pairs VALUES ('pn', 1, 'x', 1), ('pn', 2, 'y', 2);
            UPDATE nums SET qty = qty + 1 WHERE id < 1100;
            DELETE FROM nums WHERE id = 1000 + 5 * 7919;
            INSERT INTO nums VALUES (424242, 'new', 5);
            UPDATE wr SET x = 'wx' WHERE j < 4;
            DELETE FROM wr WHERE j = 10;
            INSERT INTO wr VALUES ('wn', 1, 'n');
            UPDATE hold SET opt = 'o', n = n * 2 WHERE n < 8;
            INSERT INTO hold VALUES ('hnew', 'mn', 'on', 1);
            DELETE FROM hold WHERE id = 'h10';
        """ + (FK_EDITS if os.environ.get("FUZZ_FK") else ""))
        make("bigknown", """
            UPDATE big SET payload = 'upd-' || payload, k = k + 1 WHERE k % 2 = 0;
            DELETE FROM big WHERE k % 41 = 3;
            UPDATE items SET note = 'bk' WHERE id = 'it010';
        """)
        vals = ",".join("('nb%05d', '%s', %d, 'nu%d')" % (i, "q" * 120, i, i) for i in range(700))
        make("bignew", "INSERT INTO big VALUES " + vals + "; UPDATE big SET k = -1 WHERE id = 'bg00001';")
        make("good", "INSERT INTO followup VALUES ('after', 'next good diff');")
        # references: each target applied untouched to a copy of B
        self.pristine = {}
        for h in ("B", "C"):
            p = os.path.join(w, "pristine-%s.sqlite" % h)
            shutil.copyfile(self.db(h), p)
            self.pristine[h] = p
        # B with unexported local edits (conflicts, pending changes) to rows the targets also touch
        pe = os.path.join(w, "pristine-Bedit.sqlite")
        shutil.copyfile(self.pristine["B"], pe)
        self.sql(pe, LOCAL_EDITS + (FK_LOCAL if os.environ.get("FUZZ_FK") else ""))
        self.pristine["Bedit"] = pe
        self.reference = {}
        for name, path in self.targets.items():
            if name == "good": continue
            ref = os.path.join(w, "ref-%s.sqlite" % name)
            shutil.copyfile(self.pristine["B"], ref)
            r = self.rt("diff", "apply", "--db", ref, path, "--json")
            self.reference[name] = dump(ref)
            os.unlink(ref)
        # snapshot of B's home and the bucket for sync trials
        self.snap_home = os.path.join(w, "snap-B"); shutil.copytree(self.homes["B"], self.snap_home, symlinks=True)
        self.snap_bucket = os.path.join(w, "snap-bucket"); shutil.copytree(self.bucket, self.snap_bucket, symlinks=True)
        for n, p in self.targets.items():
            print("target %-8s %7d bytes %s" % (n, os.path.getsize(p), os.path.basename(p)))

    def db(self, h):
        return os.path.join(self.homes[h], "support", "primary.sqlite")

# ----------------------------------------------------------------------------------------------------------------
# mutations. Each takes (ctx) and edits ctx.path (a plain diff file) in place, or replaces its bytes; returns a
# description. ctx.reseal: whether to recompute the digest afterwards. ctx.expect: "reject", "accept", "same"
# (accepted, equal to the untouched diff's result) or None (either).

class Ctx:
    def __init__(self, env, path, target, rng):
        self.env, self.path, self.target, self.rng = env, path, target, rng
        self.reseal = True
        self.expect = None
        self.name = None           # file name to deliver under (default: the diff id's)
        self.transport = None      # bytes to deliver to the bucket instead of the compressed file
        self.twice = False
        self.pad = True            # also try the padded (bulk-eligible) copy

    def con(self):
        c = sqlite3.connect(self.path, isolation_level=None)
        return c

    def tables(self, con):
        return [(r[0], r[1], json.loads(r[2])) for r in con.execute("SELECT id, name, columns FROM rtsync_tables ORDER BY id")]

    def pick_row(self, con, op=None):
        q = "SELECT rowid, tid, rid, op FROM rtsync_rows" + (" WHERE op = '%s'" % op if op else "")
        rows = con.execute(q).fetchall()
        return self.rng.choice(rows) if rows else None

    def table_of(self, con, tid):
        for t in self.tables(con):
            if t[0] == tid: return t
        return None

HUGE = 8 * 1024 * 1024

def rand_value(rng, kind=None):
    kind = kind or rng.choice(["int", "intmax", "intmin", "real", "inf", "ninf", "nzero", "tiny", "text", "blob", "null",
                               "emptyblob", "emptytext", "nultext", "hugetext", "hugeblob", "unicode", "numtext", "spacenum"])
    return {
        "int": lambda: rng.randint(-10**6, 10**6), "intmax": lambda: 2**63 - 1, "intmin": lambda: -2**63,
        "real": lambda: rng.uniform(-1e9, 1e9), "inf": lambda: float("inf"), "ninf": lambda: float("-inf"),
        "nzero": lambda: -0.0, "tiny": lambda: 5e-324, "text": lambda: "t%d" % rng.randint(0, 99),
        "blob": lambda: bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 20))), "null": lambda: None,
        "emptyblob": lambda: b"", "emptytext": lambda: "", "nultext": lambda: "a\x00b\x00", "hugetext": lambda: "H" * rng.choice([70000, HUGE]),
        "hugeblob": lambda: b"\xfe" * rng.choice([70000, HUGE]), "unicode": lambda: "e\u0301\u2028\U0001F600\ufeff",
        "numtext": lambda: rng.choice(["1", "01", "1.0", "1e3", "-0", " 4", "4 ", "0x10", "9223372036854775808"]),
        "spacenum": lambda: " 4",
    }[kind]()

def m_value_type(ctx):
    con = ctx.con(); r = ctx.pick_row(con, "upsert")
    if not r: return None
    tid, rid = r[1], r[2]; t = ctx.table_of(con, tid); cols = t[2]
    nonkey = [c for c in cols if c["primaryKey"] == 0]
    if not nonkey: return None
    c = ctx.rng.choice(nonkey); v = rand_value(ctx.rng)
    con.execute("UPDATE %s SET %s = ? WHERE %s = ?" % (qi(t[1]), qi(c["name"]), rowid_alias([x["name"] for x in cols])), (v, rid))
    return "value %s.%s of row %d := %r" % (t[1], c["name"], rid, v if not isinstance(v, (str, bytes)) or len(v) < 40 else type(v).__name__ + "*%d" % len(v))

def m_many_values(ctx):
    out = []
    for _ in range(ctx.rng.randint(2, 8)):
        d = m_value_type(ctx)
        if d: out.append(d)
    return "; ".join(out) or None

def m_key(ctx):
    con = ctx.con(); r = ctx.pick_row(con)
    if not r: return None
    tid, rid = r[1], r[2]; t = ctx.table_of(con, tid); cols = t[2]
    keys = [c for c in cols if c["primaryKey"] > 0]
    c = ctx.rng.choice(keys)
    alias = rowid_alias([x["name"] for x in cols])
    choice = ctx.rng.choice(["null", "dup", "nul", "int", "real", "text", "spacenum", "blob", "huge", "intmax", "emptytext", "unicode", "numtext", "own"])
    if choice == "dup":
        other = con.execute("SELECT %s FROM %s WHERE %s <> ? LIMIT 1" % (qi(c["name"]), qi(t[1]), alias), (rid,)).fetchone()
        if not other: return None
        v = other[0]
        if len(keys) > 1:  # duplicate the whole key
            src = con.execute("SELECT %s FROM %s WHERE %s <> ? ORDER BY random() LIMIT 1" % (", ".join(qi(k["name"]) for k in keys), qi(t[1]), alias), (rid,)).fetchone()
            con.execute("UPDATE %s SET %s WHERE %s = ?" % (qi(t[1]), ", ".join("%s = ?" % qi(k["name"]) for k in keys), alias), tuple(src) + (rid,))
            return "key of %s row %d := duplicate %r" % (t[1], rid, src)
    elif choice == "own":
        v = "it001" if t[1] == "items" else 1000
    else:
        v = {"null": None, "nul": "it00\x001", "int": 1, "real": 1.0, "text": "1", "spacenum": " 4", "blob": b"it001", "huge": "K" * 300000,
             "intmax": 2**63 - 1, "emptytext": "", "unicode": "i\u0307t001", "numtext": rand_value(ctx.rng, "numtext")}[choice]
    con.execute("UPDATE %s SET %s = ? WHERE %s = ?" % (qi(t[1]), qi(c["name"]), alias), (v, rid))
    return "key %s.%s of row %d (%s) := %r (%s)" % (t[1], c["name"], rid, r[3], v if not isinstance(v, str) or len(v) < 40 else "str*%d" % len(v), choice)

def m_clock(ctx):
    con = ctx.con(); r = ctx.pick_row(con)
    if not r: return None
    col = ctx.rng.choice(["hlc", "born"])
    now = int(time.time() * 1000) << 16
    v = ctx.rng.choice([2**63 - 1, -2**63, -1, 0, 1, now + (3 * 86400000 << 16), now + (3600000 << 16), now - (10**6 << 16), (1 << 62), now + (86400000 << 16) - 5])
    scope = ctx.rng.choice(["one", "all"])
    if scope == "one": con.execute("UPDATE rtsync_rows SET %s = ? WHERE rowid = ?" % col, (v, r[0]))
    else: con.execute("UPDATE rtsync_rows SET %s = ?" % col, (v,))
    return "clock %s of %s := %d" % (col, "row %d" % r[0] if scope == "one" else "all rows", v)

def m_site(ctx):
    con = ctx.con(); r = ctx.pick_row(con)
    if not r: return None
    col = ctx.rng.choice(["site", "born_site"])
    v = ctx.rng.choice([ctx.env.site["B"], ctx.env.site["C"], "", "\u00e9\u0000x", "S" * 5000, "zzzz", ctx.env.site["A"].lower(), None])
    scope = ctx.rng.choice(["one", "all"])
    if scope == "one": con.execute("UPDATE rtsync_rows SET %s = ? WHERE rowid = ?" % col, (v, r[0]))
    else: con.execute("UPDATE rtsync_rows SET %s = ?" % col, (v,))
    return "%s of %s := %r" % (col, "row %d" % r[0] if scope == "one" else "all rows", v if not v or len(v) < 40 else "S*%d" % len(v))

def m_seen(ctx):
    con = ctx.con()
    B = ctx.env.site["B"]
    now = int(time.time() * 1000) << 16
    choice = ctx.rng.choice(["own-high", "own-low", "other", "neg", "max", "author", "empty-key", "many"])
    seen = json.loads(con.execute("SELECT seen FROM rtsync_meta").fetchone()[0])
    if choice == "own-high": seen[B] = now + (10 << 16)
    elif choice == "own-low": seen[B] = 1
    elif choice == "other": seen[ctx.env.site["C"]] = 2**63 - 1
    elif choice == "neg": seen[B] = -5
    elif choice == "max": seen = {k: 2**63 - 1 for k in list(seen) + [B, ctx.env.site["C"]]}
    elif choice == "author": seen[ctx.env.site["A"]] = 2**63 - 1
    elif choice == "empty-key": seen[""] = 5
    else: seen = {"s%06d" % i: i for i in range(20000)}
    con.execute("UPDATE rtsync_meta SET seen = ?", (json.dumps(seen, sort_keys=True, separators=(",", ":"), ensure_ascii=False),))
    return "seen %s" % choice

def m_meta(ctx):
    con = ctx.con()
    choice = ctx.rng.choice(["author_user", "author_site_B", "author_site_C", "author_site_new", "kind", "seq", "seq_big", "created", "version"])
    if choice == "author_user": con.execute("UPDATE rtsync_meta SET author_user = ?", (ctx.rng.choice(["otheruser", "", "x" * 1000]),))
    elif choice == "author_site_B": con.execute("UPDATE rtsync_meta SET author_site = ?", (ctx.env.site["B"],))
    elif choice == "author_site_C": con.execute("UPDATE rtsync_meta SET author_site = ?", (ctx.env.site["C"],))
    elif choice == "author_site_new":
        con.execute("UPDATE rtsync_meta SET author_site = ?", (ksuid_new(ctx.rng),))
    elif choice == "kind": con.execute("UPDATE rtsync_meta SET kind = ?", (ctx.rng.choice(["share", "request", "snapshot", "Changes"]),))
    elif choice == "seq": con.execute("UPDATE rtsync_meta SET seq_first = ?, seq_last = ?", ctx.rng.choice([(None, None), (-5, -1), (1, 1), (0, 2**63 - 1), (5, 3), (2**63 - 1, 2**63 - 1), (-2**63, -2**63), (2, 2**63 - 1)]))
    elif choice == "seq_big": con.execute("UPDATE rtsync_meta SET seq_first = 2, seq_last = 2000000000")
    elif choice == "created": con.execute("UPDATE rtsync_meta SET created_at = ?", (ctx.rng.choice(["0000-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z", "2026-02-29T00:00:00.000Z", "1970-01-01T00:00:00.000Z"]),))
    else: con.execute("UPDATE rtsync_meta SET format_version = ?", (ctx.rng.choice([0, 2, "1", 1.0]),))
    return "meta " + choice

def m_changed(ctx):
    con = ctx.con(); r = ctx.pick_row(con, "upsert")
    if not r: return None
    t = ctx.table_of(con, r[1]); cols = [c["name"] for c in t[2]]
    nonkey = [c["name"] for c in t[2] if c["primaryKey"] == 0]
    choice = ctx.rng.choice(["missing", "dup", "case", "empty", "key", "all", "nonarray", "deep", "null", "renamed", "delete-text", "numbers"]
                            + ([] if os.environ.get("FUZZ_SKIP_KNOWN") else ["long"]))
    v = {
        "missing": lambda: json.dumps([cols[-1], "no_such_col"]), "dup": lambda: json.dumps([nonkey[0]] * 3) if nonkey else "[]",
        "case": lambda: json.dumps([c.upper() for c in nonkey]), "empty": lambda: "[]", "key": lambda: json.dumps([cols[0]]),
        "all": lambda: json.dumps(cols), "nonarray": lambda: ctx.rng.choice(['{"a":1}', '"title"', "1", "[1,2]", "[null]", "[", "[\"title\",]"]),
        "deep": lambda: "[" * 200000 + "]" * 200000, "long": lambda: json.dumps([nonkey[0] if nonkey else cols[0]] * 200000),
        "null": lambda: None, "renamed": lambda: json.dumps([n + "_renamed" for n in nonkey]),
        "delete-text": lambda: None, "numbers": lambda: '["t\\u0069tle"]',
    }[choice]()
    if choice == "delete-text":
        r = ctx.pick_row(con, "delete")
        if not r: return None
        v = json.dumps(nonkey)
    scope = ctx.rng.choice(["one", "all"]) if choice not in ("delete-text",) else "one"
    if scope == "one": con.execute("UPDATE rtsync_rows SET changed = ? WHERE rowid = ?", (v, r[0]))
    else: con.execute("UPDATE rtsync_rows SET changed = ? WHERE op = 'upsert' AND tid = ?", (v, r[1]))
    return "changed %s (%s) on %s" % (choice, (v or "NULL")[:40], "row %d" % r[0] if scope == "one" else "all upserts of " + t[1])

def m_op(ctx):
    con = ctx.con(); r = ctx.pick_row(con)
    if not r: return None
    v = ctx.rng.choice(["delete", "upsert", "UPSERT", "insert", ""])
    con.execute("UPDATE rtsync_rows SET op = ?, changed = CASE WHEN ? = 'delete' THEN NULL ELSE changed END WHERE rowid = ?", (v, v, r[0]))
    return "op of row %d := %r" % (r[0], v)

def m_cells(ctx):
    con = ctx.con(); r = ctx.pick_row(con)
    if not r: return None
    t = ctx.table_of(con, r[1]); cols = [c["name"] for c in t[2]]
    if not con.execute("SELECT 1 FROM sqlite_master WHERE name='rtsync_cells'").fetchone():
        con.execute("CREATE TABLE rtsync_cells(tid INTEGER NOT NULL, rid INTEGER NOT NULL, col TEXT NOT NULL, hlc INTEGER NOT NULL, site TEXT)")
    now = int(time.time() * 1000) << 16
    choice = ctx.rng.choice(["older", "newer", "future", "keycol", "case", "dup", "unknowncol", "negative", "othersite", "every", "norow"])
    col = ctx.rng.choice(cols)
    rows = {
        "older": [(r[1], r[2], col, 5, None)], "newer": [(r[1], r[2], col, now, ctx.env.site["C"])],
        "future": [(r[1], r[2], col, now + (5 * 86400000 << 16), None)], "keycol": [(r[1], r[2], cols[0], now, None)],
        "case": [(r[1], r[2], col.upper(), now, None)], "dup": [(r[1], r[2], col, 7, None), (r[1], r[2], col.upper(), 8, None)],
        "unknowncol": [(r[1], r[2], "nope", 7, None)], "negative": [(r[1], r[2], col, -2**63, "")],
        "othersite": [(r[1], r[2], col, now, ctx.env.site["B"])],
        "every": [(rr[0], rr[1], c, now - 1000, None) for rr in con.execute("SELECT tid, rid FROM rtsync_rows WHERE tid = ?", (r[1],)) for c in cols],
        "norow": [(r[1], 999999, col, 5, None)],
    }[choice]
    con.executemany("INSERT INTO rtsync_cells VALUES (?,?,?,?,?)", rows)
    return "cells %s (%d) on %s row %d col %s" % (choice, len(rows), t[1], r[2], col)

def rebuild_carried(con, t, newcols, transform, decl=None):
    """Rebuilds carried table t with column defs `newcols`; transform(old row dict) -> new values list."""
    tid, name, cols = t
    alias = rowid_alias([c["name"] for c in cols])
    rows = con.execute("SELECT %s AS __rid, * FROM %s" % (alias, qi(name))).fetchall()
    names = [c["name"] for c in cols]
    con.execute("DROP TABLE %s" % qi(name))
    decl = decl or (lambda c: qi(c["name"]))
    con.execute("CREATE TABLE %s (%s)" % (qi(name), ", ".join(decl(c) for c in newcols)))
    newalias = rowid_alias([c["name"] for c in newcols]) or "rowid"
    for row in rows:
        d = dict(zip(names, row[1:]))
        vals = transform(d)
        con.execute("INSERT INTO %s (%s, %s) VALUES (%s)" % (qi(name), newalias, ", ".join(qi(c["name"]) for c in newcols), ", ".join("?" * (len(newcols) + 1))),
                    [row[0]] + list(vals))
    con.execute("UPDATE rtsync_tables SET columns = ? WHERE id = ?", (json.dumps(newcols, sort_keys=True, separators=(",", ":")), tid))

def m_columns(ctx):
    con = ctx.con(); ts = ctx.tables(con)
    t = ctx.rng.choice(ts); tid, name, cols = t
    choice = ctx.rng.choice(["extra", "extra-notnull", "missing", "rename", "retype", "reorder", "pkchange", "extra-default", "rowid-col", "case"])
    newcols = [dict(c) for c in cols]
    if choice.startswith("extra"):
        nc = {"name": ctx.rng.choice(["added", "Title", "rowid", "x\"y", "\u00e9t\u00e9"]), "notNull": choice == "extra-notnull", "primaryKey": 0, "type": ctx.rng.choice(["TEXT", "", "INTEGER", "varchar(10)"])}
        if choice == "extra-default": nc["defaultValue"] = ctx.rng.choice(["'dflt'", "1/0", "(randomblob(4))", "X'00'", "CURRENT_TIMESTAMP", "'it''s'"])
        if any(c["name"].lower() == nc["name"].lower() for c in cols): nc["name"] += "2"
        newcols.append(nc)
        v = rand_value(ctx.rng, ctx.rng.choice(["text", "int", "null", "blob"]))
        rebuild_carried(con, t, newcols, lambda d: [d.get(c["name"], v) for c in newcols])
    elif choice == "missing":
        nonkey = [c for c in cols if c["primaryKey"] == 0]
        if not nonkey: return None
        drop = ctx.rng.choice(nonkey)
        newcols = [c for c in newcols if c["name"] != drop["name"]]
        rebuild_carried(con, t, newcols, lambda d: [d[c["name"]] for c in newcols])
    elif choice in ("rename", "case"):
        i = ctx.rng.randrange(len(cols)); old = cols[i]["name"]
        newcols[i]["name"] = old.upper() if choice == "case" else old + "_new"
        rebuild_carried(con, t, newcols, lambda d: [d[c["name"]] if c["name"] in d else d[old] for c in newcols])
    elif choice == "retype":
        i = ctx.rng.randrange(len(cols)); newcols[i]["type"] = ctx.rng.choice(["BLOB", "TEXT", "INTEGER", "REAL", "", "NUMERIC", "ANY"])
        con.execute("UPDATE rtsync_tables SET columns = ? WHERE id = ?", (json.dumps(newcols, separators=(",", ":")), tid))
    elif choice == "reorder":
        ctx.rng.shuffle(newcols)
        rebuild_carried(con, t, newcols, lambda d: [d[c["name"]] for c in newcols])
    elif choice == "pkchange":
        nonkey = [c for c in newcols if c["primaryKey"] == 0]
        if not nonkey: return None
        k = max(c["primaryKey"] for c in newcols); ctx.rng.choice(nonkey)["primaryKey"] = k + 1
        con.execute("UPDATE rtsync_tables SET columns = ? WHERE id = ?", (json.dumps(newcols, separators=(",", ":")), tid))
    elif choice == "rowid-col":
        nc = [{"name": n, "notNull": False, "primaryKey": 0, "type": ""} for n in ("rowid", "oid")]
        newcols += nc
        rebuild_carried(con, t, newcols, lambda d: [d.get(c["name"], 5) for c in newcols])
    return "columns %s on %s" % (choice, name)

def m_constraints(ctx):
    con = ctx.con(); ts = ctx.tables(con); t = ctx.rng.choice(ts)
    cols = [c["name"] for c in t[2]]
    choice = ctx.rng.choice(["unique", "fk", "fk-self", "withoutrowid", "fk-missing", "fk-cascade-items"])
    cons = {"foreignKeys": [], "unique": [], "withoutRowID": False}
    if choice == "unique": cons["unique"] = [[cols[-1]]]
    elif choice == "fk": cons["foreignKeys"] = [{"columns": [cols[-1]], "table": "items", "referencedColumns": [], "onDelete": "CASCADE", "onUpdate": "NO ACTION"}]
    elif choice == "fk-self": cons["foreignKeys"] = [{"columns": [cols[-1]], "table": t[1], "referencedColumns": [cols[0]], "onDelete": "SET NULL", "onUpdate": "CASCADE"}]
    elif choice == "withoutrowid": cons["withoutRowID"] = True
    elif choice == "fk-missing": cons["foreignKeys"] = [{"columns": [cols[-1]], "table": "nosuch", "referencedColumns": ["z"], "onDelete": "RESTRICT", "onUpdate": "NO ACTION"}]
    else: cons["foreignKeys"] = [{"columns": [cols[0]], "table": "items", "referencedColumns": ["id"], "onDelete": "CASCADE", "onUpdate": "CASCADE"}]
    con.execute("UPDATE rtsync_tables SET constraints = ? WHERE id = ?", (json.dumps(cons, sort_keys=True, separators=(",", ":")), t[0]))
    return "constraints %s on %s" % (choice, t[1])

def m_extra_table(ctx):
    con = ctx.con()
    tid = (con.execute("SELECT max(id) FROM rtsync_tables").fetchone()[0] or 0) + 1
    name = ctx.rng.choice(["newtab", "canary", "Canary", "followup", "t\"q", "\u00e9tab", "nums_1", "ITEMS", "x" * 255])
    choice = ctx.rng.choice(["rows", "norows", "wrkey", "fk", "notnull"])
    cols = [{"name": "id", "notNull": True, "primaryKey": 1, "type": "TEXT"}, {"name": "x", "notNull": choice == "notnull", "primaryKey": 0, "type": ""}]
    if name.lower() == "canary": cols = [{"name": "x", "notNull": False, "primaryKey": 1, "type": ""}]
    cons = {"foreignKeys": [], "unique": [], "withoutRowID": choice == "wrkey"}
    if choice == "fk": cons["foreignKeys"] = [{"columns": [cols[-1]["name"]], "table": "items", "referencedColumns": [], "onDelete": "CASCADE", "onUpdate": "NO ACTION"}]
    con.execute("INSERT INTO rtsync_tables VALUES (?,?,?,?,?)", (tid, name, json.dumps(cols, separators=(",", ":")), json.dumps(cons, separators=(",", ":")), schema_hash(name, cols)))
    con.execute("CREATE TABLE %s (%s)" % (qi(name), ", ".join(qi(c["name"]) for c in cols)))
    if choice != "norows":
        now = int(time.time() * 1000) << 16
        for i in range(3):
            con.execute("INSERT INTO %s VALUES (%s)" % (qi(name), ",".join("?" * len(cols))), (["k%d" % i, None if choice == "notnull" else "it001"][:len(cols)]))
            rid = con.execute("SELECT last_insert_rowid()").fetchone()[0]
            con.execute("INSERT INTO rtsync_rows VALUES (?,?,?,?,?,?,?,?)", (tid, rid, "upsert", now, None, now, None, None))
    return "extra table %r (%s)" % (name[:20], choice)

def m_schema_object(ctx):
    con = ctx.con()
    name = con.execute("SELECT name, columns FROM rtsync_tables ORDER BY random() LIMIT 1").fetchone()
    t, cols = name[0], [c["name"] for c in json.loads(name[1])]
    choice = ctx.rng.choice(["trigger", "view", "index", "uindex", "generated", "generated-stored", "collate", "affinity", "withoutrowid",
                             "check", "default-expr", "fts5", "rtree", "autoinc", "stat1", "temp-view-name", "view-as-table", "notnull", "pk-decl",
                             "affinity-rows", "collate-rows", "rows-typed-any", "index-on-rows"])
    tq = qi(t)
    if choice == "trigger":
        con.execute("CREATE TABLE IF NOT EXISTS canary(x)")
        con.execute("CREATE TRIGGER evil AFTER INSERT ON %s BEGIN INSERT INTO canary VALUES ('fired'); END" % tq)
    elif choice == "view":
        con.execute("CREATE VIEW evilview AS SELECT * FROM %s" % tq)
    elif choice == "index":
        con.execute("CREATE INDEX evilidx ON %s(%s)" % (tq, qi(cols[0])))
    elif choice == "uindex":
        con.execute("CREATE INDEX IF NOT EXISTS ri ON rtsync_rows(tid, rid)")
    elif choice.startswith("generated"):
        if choice == "generated" and ctx.rng.random() < 0.5:
            alias = rowid_alias(cols)
            try:
                con.execute("ALTER TABLE %s ADD COLUMN %s AS (%s)" % (tq, alias, ctx.rng.choice(["1", qi(cols[-1]), "-" + qi(cols[0]), "length(%s)" % qi(cols[0])])))
            except sqlite3.Error as e:
                return None
            return "schema generated column named %s on %s (undeclared)" % (alias, t)
        if choice == "generated":
            con.execute("ALTER TABLE %s ADD COLUMN gen AS (1)" % tq)
            return None if False else "schema generated column on %s (undeclared)" % t
        rebuild = [qi(c) for c in cols] + ["evilgen AS (%s || 'x') STORED" % qi(cols[0])]
        rows = con.execute("SELECT rowid, * FROM %s" % tq).fetchall()
        con.execute("DROP TABLE %s" % tq)
        con.execute("CREATE TABLE %s (%s)" % (tq, ", ".join(rebuild)))
        for r in rows: con.execute("INSERT INTO %s (rowid, %s) VALUES (%s)" % (tq, ", ".join(qi(c) for c in cols), ",".join("?" * (len(cols) + 1))), r)
    elif choice in ("collate", "affinity", "check", "default-expr", "notnull", "pk-decl", "withoutrowid"):
        decl = {
            "collate": lambda c: qi(c) + " COLLATE NOCASE", "affinity": lambda c: qi(c) + " " + ctx.rng.choice(["INTEGER", "TEXT", "REAL", "NUMERIC"]),
            "check": lambda c: qi(c) + " CHECK (1)", "default-expr": lambda c: qi(c) + " DEFAULT (random())", "notnull": lambda c: qi(c),
            "pk-decl": lambda c: qi(c), "withoutrowid": lambda c: qi(c),
        }[choice]
        sub = ctx.rng.choice(cols)
        rows = con.execute("SELECT rowid, * FROM %s" % tq).fetchall()
        con.execute("DROP TABLE %s" % tq)
        parts = [decl(c) if c == sub else qi(c) for c in cols]
        tail = ""
        if choice == "pk-decl": parts.append("PRIMARY KEY (%s)" % qi(sub))
        if choice == "withoutrowid": parts.append("PRIMARY KEY (%s)" % qi(cols[0])); tail = " WITHOUT ROWID"
        try:
            con.execute("CREATE TABLE %s (%s)%s" % (tq, ", ".join(parts), tail))
            for r in rows:
                if choice == "withoutrowid": con.execute("INSERT OR IGNORE INTO %s VALUES (%s)" % (tq, ",".join("?" * len(cols))), r[1:])
                else: con.execute("INSERT INTO %s (rowid, %s) VALUES (%s)" % (tq, ", ".join(qi(c) for c in cols), ",".join("?" * (len(cols) + 1))), r)
        except sqlite3.Error as e:
            return None
        return "schema %s on %s.%s" % (choice, t, sub)
    elif choice in ("affinity-rows", "collate-rows", "rows-typed-any"):
        ddl = {"affinity-rows": "CREATE TABLE rtsync_rows(tid INTEGER NOT NULL, rid INTEGER NOT NULL, op NUMERIC NOT NULL, born NUMERIC NOT NULL, born_site NUMERIC, hlc NUMERIC NOT NULL, site NUMERIC, changed NUMERIC)",
               "collate-rows": "CREATE TABLE rtsync_rows(tid INTEGER NOT NULL, rid INTEGER NOT NULL, op TEXT NOT NULL COLLATE NOCASE, born INTEGER NOT NULL, born_site TEXT COLLATE NOCASE, hlc INTEGER NOT NULL, site TEXT COLLATE RTRIM, changed TEXT COLLATE NOCASE)",
               "rows-typed-any": "CREATE TABLE rtsync_rows(tid, rid, op, born, born_site, hlc, site, changed)"}[choice]
        rows = con.execute("SELECT rowid, * FROM rtsync_rows").fetchall()
        con.execute("DROP TABLE rtsync_rows"); con.execute(ddl)
        con.executemany("INSERT INTO rtsync_rows(rowid, tid, rid, op, born, born_site, hlc, site, changed) VALUES (?,?,?,?,?,?,?,?,?)", rows)
    elif choice == "index-on-rows":
        con.execute("CREATE INDEX sqlite_autoindex_rtsync_rows_9 ON rtsync_rows(op)") if False else con.execute("CREATE UNIQUE INDEX IF NOT EXISTS rr ON rtsync_rows(rid, tid)")
    elif choice == "fts5":
        try: con.execute("CREATE VIRTUAL TABLE ftsx USING fts5(a)")
        except sqlite3.Error: return None
    elif choice == "rtree":
        try: con.execute("CREATE VIRTUAL TABLE rt USING rtree(id, a, b)")
        except sqlite3.Error: return None
    elif choice == "autoinc":
        con.execute("CREATE TABLE ai(id INTEGER PRIMARY KEY AUTOINCREMENT)"); con.execute("INSERT INTO ai DEFAULT VALUES")
    elif choice == "stat1":
        con.execute("ANALYZE")
    elif choice == "temp-view-name":
        con.execute("CREATE VIEW %s AS SELECT 1" % qi("main_" + t))
    elif choice == "view-as-table":
        # the carried table replaced by a view of the same name and columns over another table
        rows = con.execute("SELECT rowid, * FROM %s" % tq).fetchall()
        con.execute("ALTER TABLE %s RENAME TO shadowcarried" % tq)
        con.execute("CREATE VIEW %s AS SELECT * FROM shadowcarried" % tq)
    return "schema object %s on %s" % (choice, t)

def m_writable_schema(ctx):
    """Edits sqlite_schema text directly (what a hand-crafted file can hold) without changing the b-trees."""
    con = ctx.con()
    row = con.execute("SELECT name, columns FROM rtsync_tables ORDER BY random() LIMIT 1").fetchone()
    t, cols = row[0], [c["name"] for c in json.loads(row[1])]
    choice = ctx.rng.choice(["collate-comment", "affinity", "generated-virtual", "hidden-default", "rows-collate", "type-any", "tbl-name", "lower-create"])
    sql = con.execute("SELECT sql FROM sqlite_master WHERE name = ?", (t,)).fetchone()[0]
    tq = qi(t)
    if choice == "collate-comment": new = sql[:-1] + " /* x */ COLLATE NOCASE)" if False else sql.replace(qi(cols[-1]), qi(cols[-1]) + " COLLATE NOCASE", 1)
    elif choice == "affinity": new = sql.replace(qi(cols[0]), qi(cols[0]) + " INTEGER", 1)
    elif choice == "generated-virtual": new = sql[:-1] + ", " + qi("zz") + " AS (1))"
    elif choice == "hidden-default": new = sql.replace(qi(cols[-1]), qi(cols[-1]) + " DEFAULT (abs(-9223372036854775808))", 1)
    elif choice == "rows-collate":
        t = "rtsync_rows"; sql = con.execute("SELECT sql FROM sqlite_master WHERE name = 'rtsync_rows'").fetchone()[0]
        new = sql.replace("op TEXT NOT NULL", "op TEXT NOT NULL COLLATE NOCASE")
    elif choice == "type-any": new = sql.replace(qi(cols[-1]), qi(cols[-1]) + " ANY", 1)
    elif choice == "lower-create": new = "create table " + sql[len("CREATE TABLE "):]
    else:
        new = sql
    con.execute("PRAGMA writable_schema = ON")
    con.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?", (new, t))
    con.execute("PRAGMA writable_schema = OFF")
    con.close()
    return "writable_schema %s on %s" % (choice, t)

def m_bytes(ctx):
    ctx.reseal = False
    data = bytearray(open(ctx.path, "rb").read())
    choice = ctx.rng.choice(["flip", "flips", "truncate", "truncate-page", "header", "wal-bytes", "pagesize", "zero-page", "append", "reserved-bytes", "page-count"])
    ps = struct.unpack(">H", data[16:18])[0] or 65536
    if choice == "flip":
        i = ctx.rng.randrange(100, len(data)); data[i] ^= 1 << ctx.rng.randrange(8)
    elif choice == "flips":
        for _ in range(ctx.rng.randint(2, 50)):
            i = ctx.rng.randrange(0, len(data)); data[i] = ctx.rng.getrandbits(8)
    elif choice == "truncate":
        data = data[:ctx.rng.randrange(0, len(data))]
    elif choice == "truncate-page":
        data = data[:max(ps, (len(data) // ps - 1) * ps)]
    elif choice == "header":
        data[0:16] = ctx.rng.choice([b"SQLite format 2\x00", b"RTSYNCZ1" + b"\x00" * 8, b"\x00" * 16])
    elif choice == "wal-bytes":
        data[18] = 2; data[19] = 2
    elif choice == "pagesize":
        data[16:18] = struct.pack(">H", ctx.rng.choice([0, 1, 3, 1024, 32768]))
    elif choice == "zero-page":
        p = ctx.rng.randrange(1, max(2, len(data) // ps)); data[p * ps:(p + 1) * ps] = b"\x00" * ps
    elif choice == "append":
        data += bytes(ctx.rng.getrandbits(8) for _ in range(ctx.rng.choice([1, 100, ps])))
    elif choice == "reserved-bytes":
        data[20] = ctx.rng.choice([1, 32, 255])
    elif choice == "page-count":
        data[28:32] = struct.pack(">I", ctx.rng.choice([0, 1, 2**31 - 1]))
    open(ctx.path, "wb").write(bytes(data))
    return "bytes %s" % choice

def m_digest(ctx):
    con = ctx.con()
    choice = ctx.rng.choice(["stale", "random", "upper", "short"])
    if choice == "stale":
        con.execute("UPDATE rtsync_rows SET hlc = hlc + 1 WHERE rowid = 1")
    elif choice == "random":
        con.execute("UPDATE rtsync_meta SET digest = ?", (hashlib.sha256(os.urandom(8)).hexdigest(),))
    elif choice == "upper":
        con.execute("UPDATE rtsync_meta SET digest = upper(digest)")
    else:
        con.execute("UPDATE rtsync_meta SET digest = substr(digest, 1, 63)")
    ctx.reseal = False
    return "digest " + choice

def m_file_kind(ctx):
    """Replaces the diff by a WAL file, a rollback journal, an empty database, or a directory-like thing."""
    ctx.reseal = False
    choice = ctx.rng.choice(["wal", "journal", "emptydb", "wal-db", "empty"] + (["symlink-fifo"] if os.environ.get("FUZZ_FIFO") else []))
    d = tempfile.mkdtemp(dir=ctx.env.work)
    db = os.path.join(d, "x.sqlite")
    if choice in ("wal", "wal-db"):
        shutil.copyfile(ctx.path, db)
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL"); con.execute("PRAGMA wal_autocheckpoint=0")
        con.execute("UPDATE rtsync_meta SET kind = kind")
        src = db + "-wal" if choice == "wal" else db
        data = open(src, "rb").read()
        con.close()
        if choice == "wal-db": data = open(db, "rb").read()
    elif choice == "journal":
        shutil.copyfile(ctx.path, db)
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("PRAGMA journal_mode=PERSIST"); con.execute("BEGIN"); con.execute("UPDATE rtsync_meta SET kind = kind"); con.execute("COMMIT")
        data = open(db + "-journal", "rb").read(); con.close()
    elif choice == "emptydb":
        con = sqlite3.connect(db); con.execute("CREATE TABLE t(x)"); con.close(); data = open(db, "rb").read()
    elif choice == "empty":
        data = b""
    else:
        os.unlink(ctx.path); os.mkfifo(ctx.path)
        shutil.rmtree(d)
        ctx.pad = False
        return "file kind fifo"
    shutil.rmtree(d)
    open(ctx.path, "wb").write(data)
    ctx.pad = False
    return "file kind " + choice

def m_transport(ctx):
    """Compressed transport objects (only meaningful through sync; diff apply sees them still compressed)."""
    ctx.reseal = False
    raw = open(ctx.path, "rb").read()
    choice = ctx.rng.choice(["bomb-declared", "bomb-over", "trailing", "truncated", "short", "damaged", "header-only", "bomb-1g", "dict", "good"])
    z = zlib.compress(raw)
    if choice == "bomb-declared": obj = b"RTSYNCZ1" + struct.pack(">Q", 2**63) + z
    elif choice == "bomb-over": obj = b"RTSYNCZ1" + struct.pack(">Q", len(raw)) + zlib.compress(raw + b"\x00" * (50 * 1024 * 1024))
    elif choice == "bomb-1g":
        co = zlib.compressobj(9)
        body = co.compress(raw) + b"".join(co.compress(b"\x00" * (1 << 20)) for _ in range(256)) + co.flush()
        obj = b"RTSYNCZ1" + struct.pack(">Q", len(raw) + 256 * (1 << 20)) + body
    elif choice == "trailing": obj = b"RTSYNCZ1" + struct.pack(">Q", len(raw)) + z + b"X"
    elif choice == "truncated": obj = b"RTSYNCZ1" + struct.pack(">Q", len(raw)) + z[:len(z) // 2]
    elif choice == "short": obj = b"RTSYNCZ1" + struct.pack(">Q", len(raw) + 10) + z
    elif choice == "damaged":
        b = bytearray(z); b[len(b) // 2] ^= 0xFF; obj = b"RTSYNCZ1" + struct.pack(">Q", len(raw)) + bytes(b)
    elif choice == "header-only": obj = b"RTSYNCZ1" + b"\x00\x00"
    elif choice == "dict":
        co = zlib.compressobj(zdict=b"SQLite format 3"); obj = b"RTSYNCZ1" + struct.pack(">Q", len(raw)) + co.compress(raw) + co.flush()
    else:
        obj = b"RTSYNCZ1" + struct.pack(">Q", len(raw)) + z
        ctx.expect = "same"
    ctx.transport = obj
    if choice != "good":
        open(ctx.path, "wb").write(obj)
    ctx.pad = False
    return "transport " + choice

def m_rename(ctx):
    ctx.reseal = False
    choice = ctx.rng.choice(["other-ksuid", "twice", "not-ksuid", "max-ksuid", "lower-ext"])
    did = os.path.basename(ctx.target)[:-7]
    if choice == "other-ksuid": ctx.name = ksuid_new(ctx.rng) + ".sqlite"
    elif choice == "twice": ctx.twice = True; ctx.expect = "same"
    elif choice == "not-ksuid": ctx.name = "diff-" + did + ".sqlite"
    elif choice == "max-ksuid": ctx.name = "aWgEPTl1tmebfsQzFP4bxwgy80V.sqlite"
    else: ctx.name = did + ".SQLITE"
    return "rename " + choice

def m_rows_structure(ctx):
    con = ctx.con()
    choice = ctx.rng.choice(["dup-ref", "orphan", "tid-unknown", "rid-text", "rid-real", "born-text", "extra-col", "delete-nonnull", "reorder", "no-cells", "huge-rows", "meta-two"])
    r = ctx.pick_row(con)
    if choice == "dup-ref":
        con.execute("INSERT INTO rtsync_rows SELECT * FROM rtsync_rows WHERE rowid = ?", (r[0],))
    elif choice == "orphan":
        con.execute("DELETE FROM rtsync_rows WHERE rowid = ?", (r[0],))
    elif choice == "tid-unknown":
        con.execute("UPDATE rtsync_rows SET tid = 99 WHERE rowid = ?", (r[0],))
    elif choice == "rid-text":
        con.execute("UPDATE rtsync_rows SET rid = CAST(rid AS TEXT) || ' ' WHERE rowid = ?", (r[0],))
    elif choice == "rid-real":
        con.execute("ALTER TABLE rtsync_rows RENAME TO rr_old")
        con.execute("CREATE TABLE rtsync_rows(tid INTEGER NOT NULL, rid NOT NULL, op TEXT NOT NULL, born INTEGER NOT NULL, born_site TEXT, hlc INTEGER NOT NULL, site TEXT, changed TEXT)")
        con.execute("INSERT INTO rtsync_rows(rowid, tid, rid, op, born, born_site, hlc, site, changed) SELECT rowid, tid, CASE WHEN rowid = ? THEN rid + 0.0 ELSE rid END, op, born, born_site, hlc, site, changed FROM rr_old", (r[0],))
        con.execute("DROP TABLE rr_old")
    elif choice == "born-text":
        con.execute("ALTER TABLE rtsync_rows RENAME TO rr_old")
        con.execute("CREATE TABLE rtsync_rows(tid INTEGER NOT NULL, rid INTEGER NOT NULL, op TEXT NOT NULL, born NOT NULL, born_site TEXT, hlc INTEGER NOT NULL, site TEXT, changed TEXT)")
        con.execute("INSERT INTO rtsync_rows(rowid, tid, rid, op, born, born_site, hlc, site, changed) SELECT rowid, tid, rid, op, CASE WHEN rowid = ? THEN CAST(born AS TEXT) ELSE born END, born_site, hlc, site, changed FROM rr_old", (r[0],))
        con.execute("DROP TABLE rr_old")
    elif choice == "extra-col":
        con.execute("ALTER TABLE rtsync_rows ADD COLUMN pad")
        con.execute("UPDATE rtsync_rows SET pad = 'ignored'")
        ctx.expect = "same"
    elif choice == "delete-nonnull":
        d = ctx.pick_row(con, "delete")
        if not d: return None
        t = ctx.table_of(con, d[1]); cols = t[2]
        nonkey = [c for c in cols if c["primaryKey"] == 0]
        if not nonkey: return None
        con.execute("UPDATE %s SET %s = 'ghost' WHERE %s = ?" % (qi(t[1]), qi(nonkey[0]["name"]), rowid_alias([c["name"] for c in cols])), (d[2],))
    elif choice == "reorder":
        rows = con.execute("SELECT * FROM rtsync_rows").fetchall()
        ctx.rng.shuffle(rows)
        con.execute("DELETE FROM rtsync_rows")
        con.executemany("INSERT INTO rtsync_rows VALUES (?,?,?,?,?,?,?,?)", rows)
    elif choice == "no-cells":
        con.execute("DROP TABLE IF EXISTS rtsync_cells"); ctx.expect = "same"
    elif choice == "huge-rows":
        # a carried table with many rows referencing the same key (last write wins within a diff?)
        t = ctx.table_of(con, r[1]); alias = rowid_alias([c["name"] for c in t[2]])
        for i in range(50):
            con.execute("INSERT INTO %s SELECT * FROM %s WHERE %s = ?" % (qi(t[1]), qi(t[1]), alias), (r[2],))
            rid = con.execute("SELECT last_insert_rowid()").fetchone()[0]
            con.execute("INSERT INTO rtsync_rows SELECT tid, ?, op, born, born_site, hlc + ?, site, changed FROM rtsync_rows WHERE rowid = ?", (rid, i + 1, r[0]))
        return "rows structure same key 50 times more (%s row %d)" % (t[1], r[2])
    elif choice == "meta-two":
        con.execute("INSERT INTO rtsync_meta SELECT * FROM rtsync_meta")
    return "rows structure " + choice

def m_pad(ctx):
    """Digest-neutral padding (an unknown column of rtsync_meta): must give the same result."""
    ctx.expect = "same"
    return "pad only"

def m_reorder_tables(ctx):
    con = ctx.con()
    ids = [r[0] for r in con.execute("SELECT id FROM rtsync_tables ORDER BY id")]
    if len(ids) < 2: return None
    choice = ctx.rng.choice(["swap-ids", "negative-ids", "big-ids", "gap"])
    if choice == "swap-ids":
        a, b = ids[0], ids[-1]
        con.execute("UPDATE rtsync_tables SET id = -1 WHERE id = ?", (a,)); con.execute("UPDATE rtsync_tables SET id = ? WHERE id = ?", (a, b)); con.execute("UPDATE rtsync_tables SET id = ? WHERE id = -1", (b,))
        con.execute("UPDATE rtsync_rows SET tid = CASE tid WHEN ? THEN ? WHEN ? THEN ? ELSE tid END", (a, b, b, a))
        if con.execute("SELECT 1 FROM sqlite_master WHERE name='rtsync_cells'").fetchone():
            con.execute("UPDATE rtsync_cells SET tid = CASE tid WHEN ? THEN ? WHEN ? THEN ? ELSE tid END", (a, b, b, a))
        ctx.expect = "same"
    else:
        f = {"negative-ids": lambda i: -i, "big-ids": lambda i: i + 2**62, "gap": lambda i: i * 1000}[choice]
        for i in ids:
            con.execute("UPDATE rtsync_tables SET id = ? WHERE id = ?", (f(i), i))
            con.execute("UPDATE rtsync_rows SET tid = ? WHERE tid = ?", (f(i), i))
            if con.execute("SELECT 1 FROM sqlite_master WHERE name='rtsync_cells'").fetchone():
                con.execute("UPDATE rtsync_cells SET tid = ? WHERE tid = ?", (f(i), i))
        ctx.expect = "same"
    return "table ids " + choice

def m_json_defs(ctx):
    con = ctx.con(); r = con.execute("SELECT id, name, columns, constraints FROM rtsync_tables ORDER BY random() LIMIT 1").fetchone()
    choice = ctx.rng.choice(["deep-columns", "deep-constraints", "unknown-keys", "pk-bool", "notnull-int", "dup-key", "huge-number", "pretty", "type-bad", "default-null"])
    cols = json.loads(r[2])
    colstext, constext = r[2], r[3]
    if choice == "deep-columns": colstext = "[" * 100000 + "]" * 100000
    elif choice == "deep-constraints": constext = '{"unique":' + "[" * 100000 + "]" * 100000 + ',"foreignKeys":[],"withoutRowID":false}'
    elif choice == "unknown-keys":
        for c in cols: c["collate"] = "NOCASE"; c["hidden"] = 1
        colstext = json.dumps(cols); ctx.expect = "same"
    elif choice == "pk-bool": cols[0]["primaryKey"] = True; colstext = json.dumps(cols)
    elif choice == "notnull-int": cols[-1]["notNull"] = 1; colstext = json.dumps(cols)
    elif choice == "dup-key": colstext = colstext.replace('"notNull":false', '"notNull":false,"notNull":true', 1)
    elif choice == "huge-number": colstext = colstext.replace('"primaryKey":1', '"primaryKey":1e400', 1)
    elif choice == "pretty": colstext = json.dumps(cols, indent=2); ctx.expect = "same"
    elif choice == "type-bad": cols[-1]["type"] = ctx.rng.choice(["TEXT) ; DROP TABLE items; --", "INT(1)(2)", "x" * 65, "TEXT\u00a0NOT", "DOUBLE(1,)", "INTEGER(+1)"]); colstext = json.dumps(cols)
    else: cols[-1]["defaultValue"] = None; colstext = json.dumps(cols); ctx.expect = "same"
    con.execute("UPDATE rtsync_tables SET columns = ?, constraints = ? WHERE id = ?", (colstext, constext, r[0]))
    return "json defs %s on %s" % (choice, r[1])

def m_unique(ctx):
    """A carried value of a UNIQUE column (big.u) set to a value another row holds here or in the diff: the
    collision rules (the row created first keeps the value) on the set and per-row paths."""
    con = ctx.con()
    t = [x for x in ctx.tables(con) if x[1] == "big"]
    if not t: return None
    t = t[0]; alias = rowid_alias([c["name"] for c in t[2]])
    rows = [r[0] for r in con.execute("SELECT r.rid FROM rtsync_rows r WHERE r.tid = ? AND r.op = 'upsert'", (t[0],))]
    if not rows: return None
    n = ctx.rng.randint(1, 5); out = []
    for _ in range(n):
        rid = ctx.rng.choice(rows)
        v = ctx.rng.choice(["u%d" % ctx.rng.randrange(1200), "nu%d" % ctx.rng.randrange(700), "u1"])
        con.execute("UPDATE big SET u = ? WHERE %s = ?" % alias, (v, rid))
        if ctx.rng.random() < 0.5:
            con.execute("UPDATE rtsync_rows SET changed = CASE WHEN changed IS NULL THEN NULL ELSE '[\"payload\",\"k\",\"u\"]' END WHERE tid = ? AND rid = ?", (t[0], rid))
        out.append("%d:=%s" % (rid, v))
    return "unique big.u collisions " + ", ".join(out)

MUTATIONS = {
    "unique": m_unique,
    "value_type": m_value_type, "many_values": m_many_values, "key": m_key, "clock": m_clock, "site": m_site, "seen": m_seen,
    "meta": m_meta, "changed": m_changed, "op": m_op, "cells": m_cells, "columns": m_columns, "constraints": m_constraints,
    "extra_table": m_extra_table, "schema_object": m_schema_object, "writable_schema": m_writable_schema, "bytes": m_bytes,
    "digest": m_digest, "file_kind": m_file_kind, "transport": m_transport, "rename": m_rename, "rows_structure": m_rows_structure,
    "pad": m_pad, "reorder_tables": m_reorder_tables, "json_defs": m_json_defs,
}
WEIGHTS = {"unique": 4, "value_type": 6, "many_values": 4, "key": 6, "clock": 4, "site": 3, "seen": 3, "meta": 3, "changed": 5, "op": 2, "cells": 4,
           "columns": 5, "constraints": 3, "extra_table": 3, "schema_object": 5, "writable_schema": 4, "bytes": 4, "digest": 1,
           "file_kind": 1, "transport": 2, "rename": 2, "rows_structure": 4, "pad": 2, "reorder_tables": 2, "json_defs": 3}

def pad_file(src, dst):
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst, isolation_level=None)
    try:
        con.execute("ALTER TABLE rtsync_meta ADD COLUMN pad")
        con.execute("UPDATE rtsync_meta SET pad = zeroblob(70000)")
        con.execute("UPDATE rtsync_meta SET pad = randomblob(70000)")
    finally:
        con.close()

# ----------------------------------------------------------------------------------------------------------------
# the trial

class Fuzzer:
    def __init__(self, env, args):
        self.env, self.args = env, args
        self.findings = []
        self.stats = {}
        self.findings_dir = os.path.join(HERE, "findings")

    def finding(self, it, mname, desc, kind, detail, files):
        sig = (mname, kind, desc.split(" := ")[0][:60] if kind != "crash" else desc[:80])
        key = "%s-%s" % (kind, mname)
        self.stats.setdefault("findings", {}).setdefault(key, 0)
        self.stats["findings"][key] += 1
        if self.stats["findings"][key] > 3:
            return
        d = os.path.join(self.findings_dir, "%d-%d-%s-%s" % (self.args.seed, it, mname, kind))
        os.makedirs(d, exist_ok=True)
        for f in files:
            if f and os.path.exists(f) and os.path.isfile(f) and os.path.getsize(f) < 64 * 1024 * 1024:
                shutil.copyfile(f, os.path.join(d, os.path.basename(f)))
        with open(os.path.join(d, "README.txt"), "w") as fh:
            fh.write("mutation: %s\nkind: %s\n\n%s\n\nreplay: python3 tools/fuzz/diff_fuzz.py --seed %d --only-iteration %d\n" % (desc, kind, detail, self.args.seed, it))
        print("  !! FINDING %s %s: %s\n     %s" % (kind, mname, desc, detail.replace("\n", "\n     ")[:1500]), flush=True)
        self.findings.append((it, mname, kind, desc))

    def apply(self, db, files, quarantine):
        return run([self.env.rtsync, "diff", "apply", "--db", db, "--quarantine", quarantine, "--json", "--no-progress"] + files)

    def trial(self, it):
        env = self.env
        rng = random.Random("%d-%d" % (self.args.seed, it))
        names = list(MUTATIONS) if not self.args.only else self.args.only.split(",")
        mname = rng.choices(names, weights=[WEIGHTS.get(n, 1) for n in names])[0]
        target = rng.choice(["small", "small", "small", "bigknown", "bignew"])
        tdir = tempfile.mkdtemp(prefix="t%d-" % it, dir=env.work)
        try:
            return self._trial(it, rng, mname, target, tdir)
        finally:
            if not self.args.keep: shutil.rmtree(tdir, ignore_errors=True)

    def _trial(self, it, rng, mname, target, tdir):
        env = self.env
        src = env.targets[target]
        did = os.path.basename(src)[:-7]
        work = os.path.join(tdir, "m"); os.makedirs(work)
        path = os.path.join(work, did + ".sqlite")
        shutil.copyfile(src, path)
        ctx = Ctx(env, path, src, rng)
        try:
            desc = MUTATIONS[mname](ctx)
        except sqlite3.Error as e:
            desc = None
        if desc is None:
            return
        if ctx.reseal and os.path.isfile(path):
            try: reseal(path)
            except Exception as e:
                desc += " (reseal failed: %s)" % e
        base_name = "Bedit" if rng.random() < 0.35 else "B"
        desc += " [recipient %s]" % base_name
        self.stats.setdefault("mutations", {}).setdefault(mname, 0); self.stats["mutations"][mname] += 1
        print("[%d] %s on %s: %s" % (it, mname, target, desc), flush=True)
        name = ctx.name or os.path.basename(path)
        deliver = os.path.join(tdir, "d"); os.makedirs(deliver)
        mfile = os.path.join(deliver, name)
        if os.path.exists(path) and not os.path.isfile(path):
            os.mkfifo(mfile)
        else:
            shutil.copyfile(path, mfile)
        before = open(mfile, "rb").read() if os.path.isfile(mfile) else None
        q = os.path.join(tdir, "quarantine")
        base = env.pristine[base_name]
        base_dump = env.pristine_dumps[base_name]
        files = [mfile]
        # R1: the mutated diff alone, then the good diff alone
        dbB = os.path.join(tdir, "B.sqlite"); shutil.copyfile(base, dbB)
        rB = self.apply(dbB, [mfile], q)
        status = self.check_run(it, mname, desc, rB, dbB, mfile, base_dump, files, ctx, base_name)
        if status is None: return
        after1 = self.after_applied_B
        # the other readers of a diff: `diff inspect` (validates all of it up front) and the conflict log
        if os.path.isfile(mfile):
            ri = run([env.rtsync, "diff", "inspect", "--json", mfile], timeout=TIMEOUT)
            if ri.crashed():
                self.finding(it, mname, desc, "crash", "diff inspect: rc=%s timeout=%s err=%s" % (ri.rc, ri.timed_out, ri.err[-1500:]), files)
            elif status == "applied" and ri.rc != 0:
                self.finding(it, mname, desc, "inspect-vs-apply", "apply accepted the diff, inspect rejects it: %s %s" % (ri.out[-600:], ri.err[-600:]), files)
        for extra in (["--json"], []):
            rc_ = run([env.rtsync, "conflicts", "list", "--db", dbB] + extra, timeout=TIMEOUT)
            if rc_.crashed():
                self.finding(it, mname, desc, "crash", "conflicts list %s: rc=%s timeout=%s err=%s" % (extra, rc_.rc, rc_.timed_out, rc_.err[-1500:]), files)
        if ctx.twice:
            rB2 = self.apply(dbB, [mfile], q)
            if rB2.crashed() or (status == "applied" and self.status_of(rB2) != "skipped"):
                self.finding(it, mname, desc, "twice-not-skipped", "second apply: rc=%s out=%s err=%s" % (rB2.rc, rB2.out[-800:], rB2.err[-800:]), files)
        if before is not None and os.path.isfile(mfile) and open(mfile, "rb").read() != before:
            self.finding(it, mname, desc, "file-modified", "diff apply changed the diff file it read", files)
        rg = self.apply(dbB, [env.targets["good"]], q)
        if rg.crashed() or rg.rc != 0:
            self.finding(it, mname, desc, "good-diff-blocked", "after %s: good diff rc=%s %s %s" % (status, rg.rc, rg.out[-1000:], rg.err[-1000:]), files)
        final1 = dump(dbB)
        if not [r for r in final1.get("followup", ((), []))[1] if r and r[0][1] == b"after".hex()] and not any("after" in repr(r) or "6166746572" in repr(r) for r in final1.get("followup", ((), []))[1]):
            self.finding(it, mname, desc, "good-diff-lost", "good diff's row is missing", files)
        # R2: the same, per-row merge forced (an app trigger in the database keeps the bulk paths off)
        if os.path.isfile(mfile):
            dbT = os.path.join(tdir, "T.sqlite"); shutil.copyfile(base, dbT); env.sql(dbT, NOOP_TRIGGER)
            rT = self.apply(dbT, [mfile], q)
            self.compare_runs(it, mname, desc, "alone", rB, after1, "per-row (app trigger)", rT, dbT, files)
        # R3: the mutated diff and the good diff in one `diff apply` (a group of small diffs, savepoints)
        if os.path.isfile(mfile) and os.path.getsize(mfile) < 64 * 1024 and not ctx.twice and ctx.name is None:
            dbG = os.path.join(tdir, "G.sqlite"); shutil.copyfile(base, dbG)
            gdir = os.path.join(tdir, "g"); os.makedirs(gdir)
            shutil.copyfile(mfile, os.path.join(gdir, name)); shutil.copyfile(env.targets["good"], os.path.join(gdir, os.path.basename(env.targets["good"])))
            rG = self.apply(dbG, [gdir], q)
            if rG.crashed():
                self.finding(it, mname, desc, "crash", "group apply: rc=%s timeout=%s err=%s" % (rG.rc, rG.timed_out, rG.err[-1500:]), files)
            else:
                self.check_integrity(it, mname, desc, dbG, files)
                sts = self.statuses(rG)
                dG = dump(dbG)
                if sts.get(os.path.basename(name)) != status or sts.get(os.path.basename(env.targets["good"])) != "applied":
                    self.finding(it, mname, desc, "group-vs-alone-status", "alone: %s then good; group: %s" % (status, sts), files)
                elif app_view(dG) != app_view(final1) or schema_view(dG) != schema_view(final1):
                    self.finding(it, mname, desc, "group-vs-alone-result", "group result differs from applying one by one:\n" + diff_summary(app_view(final1), app_view(dG)), files)
                elif book_view(dG) != book_view(final1):
                    self.finding(it, mname, desc, "group-vs-alone-bookkeeping", "bookkeeping differs:\n" + diff_summary(book_view(final1), book_view(dG)), files)
        # second recipient: same outcome, same app tables
        if status == "applied" and base_name == "B" and "author_site_" not in desc and "seen other" not in desc and "seen max" not in desc:
            dbC = os.path.join(tdir, "C.sqlite"); shutil.copyfile(env.pristine["C"], dbC)
            rC = self.apply(dbC, [mfile], q)
            if rC.crashed():
                self.finding(it, mname, desc, "crash", "on C: rc=%s timeout=%s err=%s" % (rC.rc, rC.timed_out, rC.err[-1500:]), files)
            else:
                stC = self.status_of(rC)
                dC = dump(dbC)
                if stC != "applied":
                    self.finding(it, mname, desc, "recipients-disagree", "B applied, C %s: %s" % (stC, self.reason_of(rC)), files)
                elif app_view(after1) != app_view(dC) or schema_view(after1) != schema_view(dC):
                    self.finding(it, mname, desc, "diverge", "B and C differ after the same accepted diff:\n" + diff_summary(app_view(after1), app_view(dC)), files)
        # bulk (padded) vs per-row: the same logical diff must give the same outcome
        if ctx.pad and os.path.isfile(path) and os.path.getsize(path) < 64 * 1024 and mname != "rename":
            padded = os.path.join(tdir, "p", name); os.makedirs(os.path.dirname(padded))
            try:
                pad_file(path, padded)
            except sqlite3.Error:
                padded = None
            if padded:
                dbP = os.path.join(tdir, "P.sqlite"); shutil.copyfile(base, dbP)
                rP = self.apply(dbP, [padded], q)
                self.compare_runs(it, mname, desc, "per-row", rB, after1, "padded (bulk-eligible)", rP, dbP, files + [padded])
        if self.args.sync_every and it % self.args.sync_every == 0 and base_name == "B":
            self.sync_trial(it, mname, desc, ctx, mfile, name, status, files)

    def statuses(self, r):
        try:
            return {os.path.basename(x["file"]): x.get("status") for x in json.loads(r.out)}
        except Exception:
            return {}

    def compare_runs(self, it, mname, desc, label1, r1, dump1, label2, r2, db2, files):
        if r2.crashed():
            self.finding(it, mname, desc, "crash", "%s: rc=%s timeout=%s err=%s" % (label2, r2.rc, r2.timed_out, r2.err[-1500:]), files)
            return
        self.check_integrity(it, mname, desc, db2, files)
        s1, s2 = self.status_of(r1), self.status_of(r2)
        if s1 != s2:
            self.finding(it, mname, desc, "paths-status", "%s: %s (%s)\n%s: %s (%s)" % (label1, s1, self.reason_of(r1)[:400], label2, s2, self.reason_of(r2)[:400]), files)
            return
        d2 = dump(db2)
        if app_view(dump1) != app_view(d2) or schema_view(dump1) != schema_view(d2):
            self.finding(it, mname, desc, "paths-result", "%s and %s results differ:\n%s" % (label1, label2, diff_summary(app_view(dump1), app_view(d2))), files)
        elif book_view(dump1) != book_view(d2):
            self.finding(it, mname, desc, "paths-bookkeeping", "%s and %s bookkeeping differs:\n%s" % (label1, label2, diff_summary(book_view(dump1), book_view(d2))), files)
        elif r1.out and self.counts(r1) != self.counts(r2):
            self.finding(it, mname, desc, "paths-counts", "%s %s vs %s %s" % (label1, self.counts(r1), label2, self.counts(r2)), files)

    def counts(self, r):
        try:
            x = json.loads(r.out)[0]
            return (x.get("inserted"), x.get("updated"), x.get("deleted"), x.get("conflicts"), x.get("held"))
        except Exception:
            return None

    def strip_good(self, d):
        return d

    def status_of(self, r):
        try:
            j = json.loads(r.out)
            if isinstance(j, dict): j = j.get("reports") or j.get("diffs") or [j]
            sts = [x.get("status") for x in j]
            return sts[0] if sts else "none"
        except Exception:
            return "unparsed(rc=%s)" % r.rc

    def check_integrity(self, it, mname, desc, db, files):
        ic = integrity(db)
        if ic != ["ok"]:
            self.finding(it, mname, desc, "integrity", "integrity_check: %s" % ic[:5], files)
            return False
        con = sqlite3.connect(db)
        try:
            n = con.execute("SELECT count(*) FROM canary").fetchone()[0]
        except sqlite3.Error:
            n = -1
        con.close()
        if n != 0:
            self.finding(it, mname, desc, "canary", "canary table has %d rows" % n, files)
        return True

    def check_run(self, it, mname, desc, r, db, mfile, pristine, files, ctx, base_name="B"):
        if r.crashed():
            self.finding(it, mname, desc, "crash", "rc=%s timeout=%s secs=%.1f\nstderr: %s\nstdout: %s" % (r.rc, r.timed_out, r.secs, r.err[-2000:], r.out[-500:]), files)
            return None
        if r.secs > 60:
            self.finding(it, mname, desc, "slow", "diff apply took %.1f s" % r.secs, files)
        st = self.status_of(r)
        self.stats.setdefault("status", {}).setdefault(st, 0); self.stats["status"][st] += 1
        self.check_integrity(it, mname, desc, db, files)
        after = dump(db)
        self.after_applied_B = after
        if st in ("rejected", "deferred"):
            if r.rc != 1:
                self.finding(it, mname, desc, "exit-code", "status %s but exit %s" % (st, r.rc), files)
            base = os.path.basename(mfile)
            try:
                reason = json.loads(r.out)
                reason = json.dumps(reason)
            except Exception:
                reason = r.out
            if base not in reason and base not in r.err:
                self.finding(it, mname, desc, "unclear-error", "rejection does not name the file %s: %s %s" % (base, r.out[-600:], r.err[-600:]), files)
            if after != pristine:
                self.finding(it, mname, desc, "changed-on-reject", "database changed although the diff was %s:\n%s" % (st, diff_summary(pristine, after)), files)
            if st == "rejected" and ctx.expect == "same":
                self.finding(it, mname, desc, "harmless-rejected", "a harmless mutation was rejected: %s %s" % (r.out[-800:], r.err[-300:]), files)
            print("    -> %s: %s" % (st, self.reason_of(r)[:200]), flush=True)
            return st
        if st == "applied":
            if ctx.expect == "same" and not ctx.twice:
                ref = self.env.reference[ctx.target_name] if hasattr(ctx, "target_name") else None
            ref = self.env.reference.get(self.target_of(ctx)) if base_name == "B" else None
            if ctx.expect == "same" and ref is not None and app_view(after) != app_view(ref):
                self.finding(it, mname, desc, "harmless-differs", "harmless mutation applied differently from the untouched diff:\n" + diff_summary(app_view(ref), app_view(after)), files)
            print("    -> applied", flush=True)
            return st
        if st == "skipped":
            if after != pristine and app_view(after) != app_view(pristine):
                self.finding(it, mname, desc, "changed-on-skip", "skipped but app tables changed:\n" + diff_summary(app_view(pristine), app_view(after)), files)
            print("    -> skipped: %s" % self.reason_of(r)[:200], flush=True)
            return st
        self.finding(it, mname, desc, "odd-status", "status %s rc=%s out=%s err=%s" % (st, r.rc, r.out[-800:], r.err[-800:]), files)
        return st

    def target_of(self, ctx):
        for k, v in self.env.targets.items():
            if v == ctx.target: return k
        return None

    def reason_of(self, r):
        try:
            j = json.loads(r.out)
            if isinstance(j, dict): j = j.get("reports") or [j]
            return j[0].get("reason") or ""
        except Exception:
            return (r.err or r.out).strip().replace("\n", " | ")

    def check_converges(self, it, mname, desc, ctx, target, files):
        pass

    def sync_trial(self, it, mname, desc, ctx, mfile, name, status, files):
        """Puts the mutated file (compressed as a bucket holds diffs, or ctx.transport) into the user's inbound
        folder of a fresh copy of the bucket and runs `rtsync sync` on B (restored in place), then the good diff."""
        env = self.env
        homeB = env.homes["B"]
        shutil.rmtree(homeB); shutil.copytree(env.snap_home, homeB, symlinks=True)
        shutil.rmtree(env.bucket); shutil.copytree(env.snap_bucket, env.bucket, symlinks=True)
        inbound = os.path.join(env.bucket, env.user, "inbound")
        os.makedirs(inbound, exist_ok=True)
        if not os.path.isfile(mfile):
            return
        raw = open(mfile, "rb").read()
        obj = ctx.transport if ctx.transport is not None else (raw if raw[:8] == b"RTSYNCZ1" else b"RTSYNCZ1" + struct.pack(">Q", len(raw)) + zlib.compress(raw))
        objpath = os.path.join(inbound, name)
        open(objpath, "wb").write(obj)
        if ctx.twice:
            # the same diff delivered again under another name: must be skipped or rejected, never applied twice
            open(os.path.join(inbound, ksuid_new(random.Random(it)) + ".sqlite"), "wb").write(obj)
        r = run([env.rtsync, "sync", "--home", homeB, "--json", "--no-progress"], timeout=300)
        sync_files = files + [objpath]
        if r.crashed():
            self.finding(it, mname, desc, "sync-crash", "sync rc=%s timeout=%s err=%s" % (r.rc, r.timed_out, r.err[-2000:]), sync_files)
            return
        self.check_integrity(it, mname, desc, env.db("B"), sync_files)
        dB = dump(env.db("B"))
        base = app_view(env.pristine_dump_B)
        after_sync_app = app_view(dB)
        if status in ("rejected",) and ctx.transport is None:
            if after_sync_app != base:
                self.finding(it, mname, desc, "sync-applied-rejected", "diff apply rejected it but sync changed the app tables:\n" + diff_summary(base, after_sync_app), sync_files)
            if name not in r.out and name not in r.err:
                self.finding(it, mname, desc, "sync-unclear", "sync output does not name %s: %s %s" % (name, r.out[-600:], r.err[-600:]), sync_files)
        if status == "applied" and ctx.transport is None and after_sync_app != app_view(self.after_applied_B):
            self.finding(it, mname, desc, "sync-vs-apply", "sync result differs from diff apply result:\n" + diff_summary(app_view(self.after_applied_B), after_sync_app), sync_files)
        # then the good diff through the bucket: must apply
        good = open(env.targets["good"], "rb").read()
        open(os.path.join(inbound, os.path.basename(env.targets["good"])), "wb").write(b"RTSYNCZ1" + struct.pack(">Q", len(good)) + zlib.compress(good))
        r2 = run([env.rtsync, "sync", "--home", homeB, "--json", "--no-progress"], timeout=300)
        if r2.crashed():
            self.finding(it, mname, desc, "sync-crash", "second sync rc=%s err=%s" % (r2.rc, r2.err[-2000:]), sync_files)
            return
        con = sqlite3.connect(env.db("B"))
        ok = con.execute("SELECT 1 FROM followup WHERE id = 'after'").fetchone()
        con.close()
        if not ok:
            self.finding(it, mname, desc, "sync-good-blocked", "good diff not applied by the next sync: rc=%s %s %s" % (r2.rc, r2.out[-1200:], r2.err[-800:]), sync_files)
        # a third sync must be quiet about the bad diff (not retried forever with exit 1)
        rs = run([env.rtsync, "status", "--home", homeB, "--json"], timeout=120)
        if rs.crashed():
            self.finding(it, mname, desc, "status-crash", "rtsync status after the syncs: rc=%s timeout=%s err=%s" % (rs.rc, rs.timed_out, rs.err[-1500:]), sync_files)
        if not self.args.third_sync:
            print("    sync: rc=%s/%s" % (r.rc, r2.rc), flush=True)
            return
        r3 = run([env.rtsync, "sync", "--home", homeB, "--json", "--no-progress"], timeout=300)
        if r3.rc != 0 and not r3.crashed() and not self.stats.get("findings", {}).get("sync-stuck-" + mname):
            self.finding(it, mname, desc, "sync-stuck", "third sync still fails: rc=%s %s %s" % (r3.rc, r3.out[-1200:], r3.err[-800:]), sync_files)
        print("    sync: rc=%s/%s/%s" % (r.rc, r2.rc, r3.rc), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--start", type=int, default=0, help="first iteration number")
    ap.add_argument("--only-iteration", type=int, default=None, help="replay one iteration")
    ap.add_argument("--rtsync", default=os.path.join(REPO, ".build", "debug", "rtsync"))
    ap.add_argument("--work", default=None)
    ap.add_argument("--sync-every", type=int, default=7, help="also run the sync path every N iterations (0: never)")
    ap.add_argument("--only", default=None, help="comma-separated mutation names")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--third-sync", action="store_true", help="also check that a third sync is quiet about a rejected diff (finding 02)")
    ap.add_argument("--minutes", type=float, default=None, help="stop after this many minutes")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="rtsync-fuzz-")
    os.makedirs(work, exist_ok=True)
    rng = random.Random(args.seed)
    env = Env(os.path.abspath(args.rtsync), work, rng)
    t0 = time.time()
    env.setup()
    env.pristine_dump_B = dump(env.pristine["B"])
    env.pristine_dumps = {k: dump(v) for k, v in env.pristine.items()}
    print("setup done in %.1f s (work %s)" % (time.time() - t0, work), flush=True)
    fz = Fuzzer(env, args)
    its = [args.only_iteration] if args.only_iteration is not None else range(args.start, args.start + args.iterations)
    done = 0
    for it in its:
        if args.minutes and time.time() - t0 > args.minutes * 60: break
        try:
            fz.trial(it)
        except Exception:
            print("  fuzzer error in iteration %d:\n%s" % (it, traceback.format_exc()), flush=True)
        done += 1
    print("\n%d iterations in %.1f min" % (done, (time.time() - t0) / 60))
    print(json.dumps(fz.stats, indent=1, sort_keys=True))
    print("findings: %d" % len(fz.findings))
    for f in fz.findings: print("  ", f)
    if not args.keep: shutil.rmtree(work, ignore_errors=True)
    return 1 if fz.findings else 0

if __name__ == "__main__":
    sys.exit(main())
