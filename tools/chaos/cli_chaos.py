#!/usr/bin/env python3
"""Chaos harness for the rtsync CLI: several devices of one user on one local-folder bucket.

Drives the real `rtsync` binary, writes app data with the `sqlite3` shell (under `faketime` for a skewed
device), holds diffs back in the bucket, delivers them twice, migrates, backs up and restores, kills syncs
with SIGKILL, then settles and checks that every replica converged and nothing was lost.

Usage:
    python3 tools/chaos/cli_chaos.py --seed 7                      # one seed
    python3 tools/chaos/cli_chaos.py --seeds 1-200 --jobs 2        # many seeds
    python3 tools/chaos/cli_chaos.py --seed 7 --rounds 120 --devices 4 --keep
Exit status 1 when any seed failed; each failure names its seed and writes a report (step log, diverging rows)
into --out (default /tmp/rtsync-chaos/reports).
"""
import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import traceback
import uuid
from concurrent.futures import ProcessPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
DEFAULT_BIN = os.path.join(REPO, ".build", "debug", "rtsync")

SCHEMA = """
PRAGMA journal_mode=WAL;
CREATE TABLE parent (id TEXT PRIMARY KEY NOT NULL, name TEXT COLLATE NOCASE, score INTEGER, note TEXT);
CREATE TABLE tag (id TEXT PRIMARY KEY NOT NULL, code TEXT UNIQUE, weight REAL, data BLOB);
CREATE TABLE child (id TEXT PRIMARY KEY NOT NULL,
                    parent_id TEXT REFERENCES parent(id) ON DELETE CASCADE,
                    tag_id TEXT REFERENCES tag(id) ON DELETE SET NULL,
                    label TEXT, qty INTEGER);
"""
TABLES = ["parent", "tag", "child"]
BASE_COLS = {
    "parent": ["name", "score", "note"],
    "tag": ["code", "weight", "data"],
    "child": ["parent_id", "tag_id", "label", "qty"],
}
# Migrations run with `rtsync migrate` on one device first, later on the others.
MIGRATIONS = [
    ("parent", "extra", "ALTER TABLE parent ADD COLUMN extra TEXT DEFAULT 'none'"),  # nullable, with a default
    ("tag", "flag", "ALTER TABLE tag ADD COLUMN flag INTEGER NOT NULL DEFAULT 0"),
    ("child", "memo", "ALTER TABLE child ADD COLUMN memo TEXT COLLATE NOCASE"),
]

B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def sql_lit(v):
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, bytes):
        return "x'" + v.hex() + "'"
    return "'" + v.replace("'", "''") + "'"


def remove_faketime_leftovers(pid):
    """The faketime wrapper keeps a semaphore and a shared-memory object named by its process id in /dev/shm; one
    killed with SIGKILL leaves them behind, and a later wrapper given the same id then fails to start ("sem_open: File
    exists", in this harness and in the test suite alike). Removes those of a wrapper this harness killed."""
    for name in (f"/dev/shm/faketime_shm_{pid}", f"/dev/shm/sem.faketime_sem_{pid}"):
        try:
            os.remove(name)
        except OSError:
            pass


class Failure(Exception):
    pass


class Device:
    def __init__(self, name, home):
        self.name = name
        self.home = home
        self.db = os.path.join(home, "support", "primary.sqlite")
        self.skew = None          # faketime spec like "+2h" or None
        self.joined = False
        self.backups = []         # backup ids made by `backup create`
        self.synced_ok_since_write = True


class Chaos:
    def __init__(self, seed, rounds, devices, binary, workdir, verbose=False, mask_known=False):
        self.mask_known = mask_known
        self.kill_other_weight = 1
        self.migrate_weight = 1
        self.seed = seed
        self.rng = random.Random(seed)
        self.rounds = rounds
        self.ndev = devices
        self.bin = binary
        self.work = workdir
        self.verbose = verbose
        self.bucket = os.path.join(workdir, "bucket")
        self.held_dir = os.path.join(workdir, "held")
        self.archive_dir = os.path.join(workdir, "archive")
        self.log = []
        self.problems = []        # (kind, text)
        self.devices = []
        self.user = None
        self.step_no = 0
        # ledger
        self.inserted = {t: {} for t in TABLES}   # key -> (device, step)
        self.gone_local = {t: set() for t in TABLES}   # keys a local write removed on some device
        self.codes_seen = {}      # code -> set of tag keys that ever held it
        self.child_parents = {}   # child key -> parents it ever referenced
        self.migrations_started = []   # indexes of MIGRATIONS
        self.kills = 0
        self.counts = {}

    # ----- logging / commands
    def note(self, text):
        line = f"[{self.step_no:04d}] {text}"
        self.log.append(line)
        if self.verbose:
            print(line, flush=True)

    def problem(self, kind, text):
        self.problems.append((kind, text))
        self.note(f"!! {kind}: {text}")

    def env(self, dev):
        e = dict(os.environ)
        e["RTSYNC_LOCK_WAIT"] = "20"
        e.pop("RTSYNC_HOME", None)
        e["TMPDIR"] = os.path.join(self.work, "tmp")
        return e

    def prefix(self, dev):
        if dev is not None and dev.skew:
            # (not LD_PRELOAD of libfaketime by hand: rtsync then sees no arguments at all, prints its help and
            # exits 0; the wrapper's occasional "sem_open: File exists" is retried instead, see run_wrapped)
            return ["faketime", "-f", dev.skew]
        return []

    def rt(self, dev, args, expect_ok=True, allowed_errors=(), timeout=120, kill_after=None):
        """Runs rtsync; returns (rc, out, err). kill_after: seconds after which SIGKILL is sent."""
        cmd = self.prefix(dev) + [self.bin] + args
        t0 = time.time()
        for _ in range(5):
            if not (dev is not None and dev.skew) or kill_after is not None:
                break
            # the faketime wrapper fails now and then before starting rtsync ("sem_open: File exists"): probe it
            probe = subprocess.run(["faketime", "-f", dev.skew, "true"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if probe.returncode == 0:
                break
            time.sleep(0.05)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env(dev),
                             cwd=self.work, start_new_session=True)
        killed = False
        if kill_after is not None:
            try:
                out, err = p.communicate(timeout=kill_after)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                killed = True
                out, err = p.communicate()
                remove_faketime_leftovers(p.pid)
        else:
            try:
                out, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                out, err = p.communicate()
                remove_faketime_leftovers(p.pid)
                self.problem("hang", f"{' '.join(args)} on {dev.name if dev else '-'} did not end in {timeout}s")
                return (-9, out.decode(errors="replace"), err.decode(errors="replace"))
        rc = p.returncode
        out = out.decode(errors="replace")
        err = err.decode(errors="replace")
        if "sem_open" in err and "faketime" in err and rc != 0 and not killed:
            self.note("   (faketime wrapper failed to start; running the command again)")
            return self.rt(dev, args, expect_ok, allowed_errors, timeout, kill_after)
        dt = time.time() - t0
        tag = f"rtsync {' '.join(a if len(a) < 80 else a[:77] + '...' for a in args)}"
        if dev is not None and dev.skew:
            tag = f"faketime {dev.skew} " + tag
        if killed:
            self.kills += 1
            self.note(f"{tag} -> KILLED -9 after {kill_after*1000:.0f} ms (rc {rc})")
            return (rc, out, err)
        self.note(f"{tag} -> rc {rc} ({dt:.2f}s)")
        if rc < 0 or rc >= 128:
            self.problem("crash", f"{tag}: rc {rc}\nstdout: {out[-2000:]}\nstderr: {err[-3000:]}")
        elif rc != 0:
            if any(a in err for a in allowed_errors):
                self.note(f"   expected error: {err.strip()[:300]}")
            elif expect_ok:
                self.problem("command-failed", f"{tag}: rc {rc}\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}")
        if self.verbose and out.strip() and rc == 0 and "--json" not in args:
            for l in out.strip().splitlines():
                self.note("   | " + l)
        return (rc, out, err)

    def shell(self, dev, sql):
        """Runs app SQL with the sqlite3 shell (foreign keys on, as an app would); returns (ok, err)."""
        script = ".timeout 10000\nPRAGMA foreign_keys=ON;\n" + sql + ";\n"
        cmd = self.prefix(dev) + ["sqlite3", "-bail", "-batch", dev.db]
        for _ in range(6):
            p = subprocess.run(cmd, input=script.encode(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
            err = p.stderr.decode(errors="replace").strip()
            if "sem_open" not in err:
                break
            time.sleep(0.05)
        return p.returncode == 0, err

    def q(self, dev, sql, params=()):
        con = sqlite3.connect(dev.db, timeout=30)
        try:
            return con.execute(sql, params).fetchall()
        finally:
            con.close()

    def columns(self, dev, table):
        return [r[1] for r in self.q(dev, f"PRAGMA table_info({table})")]

    def keys(self, dev):
        return {t: set(r[0] for r in self.q(dev, f"SELECT id FROM {t}")) for t in TABLES}

    # ----- ids and values
    def new_key(self, table):
        r = self.rng
        style = r.random()
        if style < 0.5:   # KSUID-like (27 base62)
            k = "".join(r.choice(B62) for _ in range(27))
        elif style < 0.9:
            k = str(uuid.UUID(int=r.getrandbits(128), version=4))
        else:             # mixed-case text key (keys compare BINARY)
            k = table[0] + "-" + "".join(r.choice("aAbBcC") for _ in range(6)) + "-" + "".join(r.choice(B62) for _ in range(8))
        return k

    def val(self, table, col):
        r = self.rng
        x = r.random()
        if x < 0.08:
            return None
        if col == "name":
            return r.choice(["alice", "Alice", "ALICE", "bob", "Bob", "carol", "Dave", "\u00e9t\u00e9", "e\u0301te\u0301", "zoë", ""]) + (str(r.randint(0, 3)) if r.random() < 0.3 else "")
        if col in ("score", "qty", "flag"):
            return r.choice([0, 1, -1, r.randint(-1000, 1000), r.randint(-2**62, 2**62)])
        if col in ("note", "label", "extra"):
            return r.choice(["", "x", "hello world", "it's", "line\nbreak", "ünï", "%_like", "x" * r.randint(1, 300)]) + str(r.randint(0, 99))
        if col == "memo":
            return r.choice(["memo", "MEMO", "Memo", "other"])
        if col == "code":
            return "C" + str(r.randint(0, 14))
        if col == "weight":
            return r.choice([0.5, 1.25, -3.75, 1e-9, 123456.789, float(r.randint(-100, 100)) / 8])
        if col == "data":
            return bytes(r.getrandbits(8) for _ in range(r.randint(0, 24)))
        raise ValueError(col)

    # ----- app operations
    def existing(self, dev, table):
        return sorted(r[0] for r in self.q(dev, f"SELECT id FROM {table}"))

    def writable_cols(self, dev, table):
        cols = [c for c in self.columns(dev, table) if c != "id"]
        return cols

    def row_values(self, dev, table, cols):
        vals = {}
        for c in cols:
            if c == "parent_id":
                ps = self.existing(dev, "parent")
                vals[c] = self.rng.choice(ps) if ps and self.rng.random() < 0.9 else None
            elif c == "tag_id":
                ts = self.existing(dev, "tag")
                vals[c] = self.rng.choice(ts) if ts and self.rng.random() < 0.7 else None
            else:
                vals[c] = self.val(table, c)
        return vals

    def app_write(self, dev, desc, sql):
        before = self.keys(dev)
        ok, err = self.shell(dev, sql)
        after = self.keys(dev)
        self.note(f"{dev.name}: {desc}: {sql[:400]}" + ("" if ok else f"  -> refused: {err[:200]}"))
        if not ok and not any(s in err for s in ("UNIQUE constraint failed", "FOREIGN KEY constraint failed", "NOT NULL constraint failed")):
            self.problem("app-write-error", f"{dev.name}: {sql}: {err}")
        for t in TABLES:
            for k in before[t] - after[t]:
                self.gone_local[t].add(k)
            for k in after[t] - before[t]:
                self.inserted[t].setdefault(k, (dev.name, self.step_no))
        if ok:
            # record codes now held on this device
            for (k, code) in self.q(dev, "SELECT id, code FROM tag WHERE code IS NOT NULL"):
                self.codes_seen.setdefault(code, set()).add(k)
            for (k, pid) in self.q(dev, "SELECT id, parent_id FROM child WHERE parent_id IS NOT NULL"):
                self.child_parents.setdefault(k, set()).add(pid)
        return ok

    def op_insert(self, dev, mode="plain"):
        table = self.rng.choice(TABLES)
        cols = self.writable_cols(dev, table)
        key = self.new_key(table)
        if mode == "reinsert":
            gone = sorted(self.gone_local[table])
            if gone:
                key = self.rng.choice(gone)
        vals = self.row_values(dev, table, cols)
        names = ["id"] + list(vals)
        values = [key] + [vals[c] for c in vals]
        verb = {"plain": "INSERT", "reinsert": "INSERT", "replace": "INSERT OR REPLACE", "ignore": "INSERT OR IGNORE"}[mode]
        if mode == "replace" and self.rng.random() < 0.6:
            ex = self.existing(dev, table)
            if ex:
                values[0] = self.rng.choice(ex)
        sql = f"{verb} INTO {table}({', '.join(names)}) VALUES ({', '.join(sql_lit(v) for v in values)})"
        self.app_write(dev, mode + " " + table, sql)

    def op_upsert(self, dev):
        table = self.rng.choice(TABLES)
        ex = self.existing(dev, table)
        key = self.rng.choice(ex) if ex and self.rng.random() < 0.7 else self.new_key(table)
        cols = self.writable_cols(dev, table)
        vals = self.row_values(dev, table, cols)
        upd = self.rng.sample(cols, k=min(len(cols), self.rng.randint(1, 3)))
        names = ["id"] + list(vals)
        sql = (f"INSERT INTO {table}({', '.join(names)}) VALUES ({', '.join(sql_lit(v) for v in [key] + list(vals.values()))}) "
               f"ON CONFLICT(id) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in upd))
        self.app_write(dev, "upsert " + table, sql)

    def op_update(self, dev, table=None, key=None, cols=None):
        table = table or self.rng.choice(TABLES)
        if key is None:
            ex = self.existing(dev, table)
            if not ex:
                return
            key = self.rng.choice(ex)
        allc = self.writable_cols(dev, table)
        cols = cols or self.rng.sample(allc, k=min(len(allc), self.rng.randint(1, 3)))
        cols = [c for c in cols if c in allc]
        if not cols:
            return
        vals = self.row_values(dev, table, cols)
        sets = ", ".join(f"{c} = {sql_lit(v)}" for c, v in vals.items())
        # sometimes an update that changes nothing, or one written as an expression
        if self.rng.random() < 0.05:
            sets = f"{cols[0]} = {cols[0]}"
        self.app_write(dev, "update " + table, f"UPDATE {table} SET {sets} WHERE id = {sql_lit(key)}")

    def op_delete(self, dev):
        table = self.rng.choices(TABLES, weights=[3, 2, 3])[0]
        ex = self.existing(dev, table)
        if not ex:
            return
        if self.rng.random() < 0.1 and table == "tag":
            code = "C" + str(self.rng.randint(0, 14))
            self.app_write(dev, "delete by value", f"DELETE FROM tag WHERE code = {sql_lit(code)}")
            return
        key = self.rng.choice(ex)
        self.app_write(dev, "delete " + table + (" (cascade)" if table == "parent" else ""),
                       f"DELETE FROM {table} WHERE id = {sql_lit(key)}")

    def op_rekey(self, dev):
        table = self.rng.choice(["child", "tag"])
        ex = self.existing(dev, table)
        if not ex:
            return
        self.app_write(dev, "rekey " + table, f"UPDATE {table} SET id = {sql_lit(self.new_key(table))} WHERE id = {sql_lit(self.rng.choice(ex))}")

    def op_multi(self, dev):
        """Several statements in one transaction."""
        parts = []
        pk = self.new_key("parent")
        parts.append(f"INSERT INTO parent(id, name, score) VALUES ({sql_lit(pk)}, {sql_lit(self.val('parent', 'name'))}, {self.rng.randint(0, 9)})")
        for _ in range(self.rng.randint(1, 3)):
            parts.append(f"INSERT INTO child(id, parent_id, label) VALUES ({sql_lit(self.new_key('child'))}, {sql_lit(pk)}, {sql_lit(self.val('child', 'label'))})")
        if self.rng.random() < 0.3:
            parts.append(f"UPDATE parent SET note = {sql_lit(self.val('parent', 'note'))} WHERE id = {sql_lit(pk)}")
        self.app_write(dev, "transaction", "BEGIN; " + "; ".join(parts) + "; COMMIT")

    def op_conflict(self):
        """The same row edited on several devices before they sync."""
        devs = [d for d in self.devices if d.joined]
        if len(devs) < 2:
            return
        table = self.rng.choice(TABLES)
        common = None
        for d in devs:
            ks = set(self.existing(d, table))
            common = ks if common is None else common & ks
        if not common:
            return
        key = self.rng.choice(sorted(common))
        cols = self.rng.sample(BASE_COLS[table], k=self.rng.randint(1, 2))
        chosen = self.rng.sample(devs, k=self.rng.randint(2, len(devs)))
        self.note(f"concurrent edits of {table} {key} {cols} on {[d.name for d in chosen]}")
        for d in chosen:
            r = self.rng.random()
            if r < 0.15:
                self.app_write(d, "concurrent delete", f"DELETE FROM {table} WHERE id = {sql_lit(key)}")
            elif r < 0.25:
                vals = self.row_values(d, table, self.writable_cols(d, table))
                self.app_write(d, "concurrent replace", f"INSERT OR REPLACE INTO {table}(id, {', '.join(vals)}) VALUES ({sql_lit(key)}, {', '.join(sql_lit(v) for v in vals.values())})")
            else:
                self.op_update(d, table, key, cols)

    # ----- bucket chaos
    def inbound_dir(self):
        return os.path.join(self.bucket, self.user, "inbound")

    def inbound_objects(self):
        d = self.inbound_dir()
        if not os.path.isdir(d):
            return []
        return sorted(n for n in os.listdir(d) if n.endswith(".sqlite") and not n.startswith("."))

    def archive_inbound(self):
        for n in self.inbound_objects():
            a = os.path.join(self.archive_dir, n)
            if not os.path.exists(a):
                shutil.copy2(os.path.join(self.inbound_dir(), n), a)

    def op_hold(self):
        objs = self.inbound_objects()
        if not objs:
            return
        for n in self.rng.sample(objs, k=min(len(objs), self.rng.randint(1, 2))):
            shutil.move(os.path.join(self.inbound_dir(), n), os.path.join(self.held_dir, n))
            self.note(f"bucket: held back {n}")

    def op_release(self, all_=False):
        held = sorted(os.listdir(self.held_dir))
        if not held:
            return
        os.makedirs(self.inbound_dir(), exist_ok=True)
        pick = held if all_ else self.rng.sample(held, k=self.rng.randint(1, len(held)))
        for n in pick:
            shutil.move(os.path.join(self.held_dir, n), os.path.join(self.inbound_dir(), n))
            self.note(f"bucket: released {n}")

    def op_duplicate(self):
        archived = sorted(os.listdir(self.archive_dir))
        present = set(self.inbound_objects()) | set(os.listdir(self.held_dir))
        cands = [n for n in archived if n not in present]
        if not cands:
            return
        n = self.rng.choice(cands)
        os.makedirs(self.inbound_dir(), exist_ok=True)
        shutil.copy2(os.path.join(self.archive_dir, n), os.path.join(self.inbound_dir(), n))
        self.note(f"bucket: delivered {n} again (it was pruned)")

    # ----- device operations
    def sync(self, dev, kill=False):
        if kill:
            delay = self.rng.choice([0.005, 0.02, 0.05, 0.08, 0.12, 0.2, 0.3])
            self.rt(dev, ["sync", "--home", dev.home], kill_after=delay)
            if self.rng.random() < 0.3:
                self.rt(dev, ["sync", "--home", dev.home], kill_after=self.rng.choice([0.01, 0.05, 0.1]))
        rc, out, err = self.rt(dev, ["sync", "--home", dev.home, "--json"])
        self.archive_inbound()
        return self.parse_sync(dev, rc, out)

    def parse_sync(self, dev, rc, out):
        try:
            j = json.loads(out)
        except Exception:
            return None
        rep = j.get("report", {})
        for a in rep.get("applied", []):
            if a.get("status") in ("rejected",):
                self.problem("diff-rejected", f"{dev.name}: {json.dumps(a)[:1500]}")
        moved = bool(rep.get("exported")) or any(a.get("status") == "applied" for a in rep.get("applied", []))
        deferred = any(a.get("status") == "deferred" for a in rep.get("applied", []))
        if deferred:
            self.note(f"   {dev.name}: deferred diffs: {[(a.get('diffId'), a.get('reason')) for a in rep.get('applied', []) if a.get('status') == 'deferred']}")
        if self.verbose:
            for p in rep.get("phases", []):
                self.note(f"   {dev.name} {p.get('name')}: {p.get('summary')}" + (f" ERROR {p.get('error')}" if p.get("error") else ""))
        return {"moved": moved, "deferred": deferred, "json": j}

    def op_migrate(self, dev=None, idx=None):
        if idx is None:
            idx = self.rng.randrange(len(MIGRATIONS))
        table, col, sql = MIGRATIONS[idx]
        devs = [dev] if dev else [d for d in self.devices if d.joined]
        if dev is None:
            dev = self.rng.choice(devs)
        if col in self.columns(dev, table):
            return
        if idx not in self.migrations_started:
            self.migrations_started.append(idx)
        self.rt(dev, ["migrate", "--home", dev.home, sql])

    def op_backup(self, dev):
        upload = self.rng.random() < 0.4
        if upload and self.mask_known:
            # sidestep defect 6 (an uploaded backup holding rows never exported; deleted before the next export,
            # they live on in devices that join from it): export first
            self.note(f"{dev.name}: (mask-known) sync before backup create --upload")
            self.sync(dev)
        rc, out, err = self.rt(dev, ["backup", "create", "--home", dev.home, "--json"] + (["--upload"] if upload else []))
        try:
            j = json.loads(out)
            bid = j.get("id") or j.get("backup", {}).get("id")
            if bid:
                dev.backups.append(bid)
        except Exception:
            pass

    def op_restore(self, dev):
        if not dev.backups:
            return
        # A restore rolls back what this device did not export; export everything first (nothing to lose).
        self.sync(dev)
        bid = self.rng.choice(dev.backups[-3:])
        rc, out, err = self.rt(dev, ["backup", "restore", "--home", dev.home, bid, "--json"],
                               allowed_errors=("no backup",))
        if rc == 0:
            self.mask_diff_id(dev)

    def op_kill_other(self, dev):
        """kill -9 of compact, backup create or backup restore, then the command again."""
        what = self.rng.choice(["compact", "backup", "restore"])
        delay = self.rng.choice([0.005, 0.02, 0.05, 0.1, 0.2])
        if what == "compact":
            self.rt(dev, ["compact", "--home", dev.home], kill_after=delay, allowed_errors=("has not caught up",))
            self.op_compact(dev)
        elif what == "backup":
            if self.mask_known:
                self.sync(dev)
            self.rt(dev, ["backup", "create", "--home", dev.home, "--upload"], kill_after=delay)
            self.op_backup(dev)
        elif dev.backups:
            self.sync(dev)
            bid = self.rng.choice(dev.backups[-3:])
            # a backup id may have been rotated away (keepBackups): a documented refusal
            self.rt(dev, ["backup", "restore", "--home", dev.home, bid], kill_after=delay, allowed_errors=("no backup with id",))
            rc, out, err = self.rt(dev, ["backup", "restore", "--home", dev.home, bid, "--json"], allowed_errors=("no backup with id",))
            if rc == 0:
                self.mask_diff_id(dev)

    def op_compact(self, dev):
        # documented refusal: a restored database compacts only after a sync caught it up
        self.rt(dev, ["compact", "--home", dev.home], allowed_errors=("has not caught up",))
        self.archive_inbound()

    def op_skew(self, dev):
        old = dev.skew
        dev.skew = self.rng.choice([None, "+2h", "-2h", "+30m", "-90m", "+5h", "-5m"])
        self.note(f"{dev.name}: clock skew {old} -> {dev.skew}")

    # ----- setup
    def setup(self):
        os.makedirs(self.work, exist_ok=True)
        for d in (self.bucket, self.held_dir, self.archive_dir, os.path.join(self.work, "tmp")):
            os.makedirs(d, exist_ok=True)
        for i in range(self.ndev):
            self.devices.append(Device(chr(ord("A") + i), os.path.join(self.work, "dev" + chr(ord("A") + i))))
        if self.rng.random() < 0.3:
            d = self.rng.choice(self.devices)
            d.skew = self.rng.choice(["+2h", "-2h", "+3h", "-3h", "+10m"])
        a = self.devices[0]
        os.makedirs(os.path.join(a.home, "support"))
        subprocess.run(["sqlite3", a.db], input=SCHEMA.encode(), check=True, stdout=subprocess.DEVNULL)
        rc, out, err = self.rt(a, ["init", "--home", a.home, "--bucket", "file://" + self.bucket, "--json"])
        if rc != 0:
            raise Failure("init failed: " + err)
        self.user = json.loads(out)["userId"]
        settings = os.path.join(a.home, "settings.json")
        s = json.load(open(settings))
        if self.rng.random() < 0.5:
            s["compactThreshold"] = self.rng.choice([3, 6, 12])
        if self.rng.random() < 0.3:
            s["backupIntervalMinutes"] = 0
        if self.rng.random() < 0.6:
            # roll-ups of a device's small diffs, made early and often (the default waits for 16)
            s["rollupThreshold"] = self.rng.choice([2, 3, 4])
        json.dump(s, open(settings, "w"))
        self.compact_threshold = s["compactThreshold"]
        a.joined = True
        # A few rows before anyone joins.
        n = self.rng.randint(0, 4)
        if self.mask_known and n == 0:
            # sidestep defect 5 (a first device whose syncs export nothing publishes no cursor, so compaction
            # elsewhere prunes diffs it never applied): give its first sync something to export
            self.note("(mask-known) one row so that A's first sync publishes its cursor")
            n = 1
        for _ in range(n):
            self.op_insert(a)
        self.sync(a)
        os.makedirs(self.inbound_dir(), exist_ok=True)
        for d in self.devices[1:]:
            if self.rng.random() < 0.7:
                self.join(d)

    def join(self, d):
        rc, out, err = self.rt(d, ["init", "--home", d.home, "--bucket", "file://" + self.bucket, "--user", self.user, "--json"])
        if rc != 0:
            self.problem("join-failed", err)
            return
        s = json.load(open(os.path.join(d.home, "settings.json")))
        a = json.load(open(os.path.join(self.devices[0].home, "settings.json")))
        s["compactThreshold"] = a["compactThreshold"]
        s["backupIntervalMinutes"] = a["backupIntervalMinutes"]
        if "rollupThreshold" in a:
            s["rollupThreshold"] = a["rollupThreshold"]
        json.dump(s, open(os.path.join(d.home, "settings.json"), "w"))
        d.joined = True
        self.note(f"{d.name} joined: {json.loads(out).get('source')}")
        self.mask_diff_id(d)
        if self.mask_known:
            # sidestep defect 2 (diffs pruned between a device's init and its first sync never reach it)
            self.note(f"{d.name}: (mask-known) first sync right after init")
            self.sync(d)

    def mask_diff_id(self, d):
        # --mask-known: sidestep defect 1 (a copied database keeps the last diff id of the site it was copied
        # from, so two sites hand out the same successor ids). Writes rtsync_site, as a fix would.
        if self.mask_known:
            con = sqlite3.connect(d.db, timeout=30)
            con.execute("UPDATE rtsync_site SET last_diff_id = NULL")
            con.commit()
            con.close()
            self.note(f"{d.name}: (mask-known) last_diff_id cleared")

    # ----- the run
    def run(self):
        self.setup()
        ops = [
            ("insert", 14), ("update", 12), ("delete", 5), ("replace", 3), ("upsert", 3), ("ignore", 1), ("reinsert", 2),
            ("rekey", 1), ("multi", 2), ("conflict", 5), ("sync", 18), ("sync_kill", 2), ("hold", 3), ("release", 3),
            ("duplicate", 2), ("migrate", self.migrate_weight), ("backup", 1.5), ("restore", 1), ("compact", 1), ("skew", 1), ("join", 1), ("kill_other", self.kill_other_weight),
        ]
        names = [o for o, _ in ops]
        weights = [w for _, w in ops]
        for step in range(self.rounds):
            self.step_no = step + 1
            op = self.rng.choices(names, weights)[0]
            joined = [d for d in self.devices if d.joined]
            dev = self.rng.choice(joined)
            self.counts[op] = self.counts.get(op, 0) + 1
            if op in ("insert", "replace", "ignore", "reinsert"):
                self.op_insert(dev, {"insert": "plain"}.get(op, op))
            elif op == "update":
                self.op_update(dev)
            elif op == "delete":
                self.op_delete(dev)
            elif op == "upsert":
                self.op_upsert(dev)
            elif op == "rekey":
                self.op_rekey(dev)
            elif op == "multi":
                self.op_multi(dev)
            elif op == "conflict":
                self.op_conflict()
            elif op == "sync":
                self.sync(dev)
            elif op == "sync_kill":
                self.sync(dev, kill=True)
            elif op == "hold":
                self.op_hold()
            elif op == "release":
                self.op_release()
            elif op == "duplicate":
                self.op_duplicate()
            elif op == "migrate":
                # a new migration on one device, or one already started on another device
                if self.migrations_started and self.rng.random() < 0.6:
                    self.op_migrate(dev, self.rng.choice(self.migrations_started))
                else:
                    self.op_migrate(dev)
            elif op == "backup":
                self.op_backup(dev)
            elif op == "restore":
                self.op_restore(dev)
            elif op == "compact":
                self.op_compact(dev)
            elif op == "kill_other":
                self.op_kill_other(dev)
            elif op == "skew":
                self.op_skew(dev)
            elif op == "join":
                later = [d for d in self.devices if not d.joined]
                if later:
                    self.join(later[0])
        self.settle()
        self.check()
        return not self.problems

    def settle(self):
        self.step_no += 1
        self.note("=== settle")
        for d in self.devices:
            if not d.joined:
                self.join(d)
        self.op_release(all_=True)
        for idx in list(self.migrations_started):
            for d in self.devices:
                self.op_migrate(d, idx)
        quiet_rounds = 0
        for r in range(14):
            moved = False
            order = self.devices[:]
            self.rng.shuffle(order)
            for d in order:
                res = self.sync(d)
                if res is None or res["moved"] or res["deferred"]:
                    moved = True
            if not moved:
                quiet_rounds += 1
                if quiet_rounds >= 2:
                    break
            else:
                quiet_rounds = 0
        else:
            self.problem("no-quiescence", "devices still exchanging diffs after 14 full sync rounds")

    def dump(self, dev, table):
        cols = sorted(self.columns(dev, table))
        rows = self.q(dev, f"SELECT {', '.join('quote(' + c + ')' for c in cols)} FROM {table} ORDER BY id")
        return cols, rows

    def check(self):
        self.note("=== check")
        ref = self.devices[0]
        for d in self.devices:
            ic = self.q(d, "PRAGMA integrity_check")
            if ic != [("ok",)]:
                self.problem("integrity", f"{d.name}: {ic[:5]}")
            fk = self.q(d, "PRAGMA foreign_key_check")
            if fk:
                self.problem("foreign-keys", f"{d.name}: foreign_key_check: {fk[:10]}")
            rc, out, err = self.rt(d, ["status", "--home", d.home, "--json"])
            try:
                st = json.loads(out)
                for k in ("pendingChanges", "quarantined", "heldRows", "gaps", "outbox", "catchUpPending", "nullKeyRows"):
                    v = st.get(k)
                    if v not in (None, 0, [], {}, False):
                        self.problem("status", f"{d.name}: {k} = {json.dumps(v)[:800]}")
            except Exception as e:
                self.problem("status", f"{d.name}: could not read status --json: {e}: {out[:300]} {err[:300]}")
            qdir = os.path.join(d.home, "support", "quarantine")
            if os.path.isdir(qdir) and os.listdir(qdir):
                self.problem("quarantine", f"{d.name}: {sorted(os.listdir(qdir))}")
        # Diagnosis: one diff id used by two sites (two different diffs under one bucket key).
        authors = {}
        for d in self.devices:
            for (did, site) in self.q(d, "SELECT diff_id, author_site FROM rtsync_applied"):
                authors.setdefault(did, set()).add(site)
        for did, sites in sorted(authors.items()):
            if len(sites) > 1:
                self.problem("diff-id-collision", f"diff id {did} recorded as written by {sorted(sites)} on different devices")
        for t in TABLES:
            cols0, rows0 = self.dump(ref, t)
            for d in self.devices[1:]:
                cols, rows = self.dump(d, t)
                if cols != cols0:
                    self.problem("diverged-schema", f"{t}: {ref.name} {cols0} vs {d.name} {cols}")
                    continue
                if rows != rows0:
                    a = {r[cols0.index("id")]: r for r in rows0}
                    b = {r[cols0.index("id")]: r for r in rows}
                    lines = []
                    for k in sorted(set(a) | set(b)):
                        if a.get(k) != b.get(k):
                            lines.append(f"  key {k}:\n    {ref.name}: {a.get(k)}\n    {d.name}: {b.get(k)}")
                    self.problem("diverged", f"{t} ({', '.join(cols0)}): {ref.name} vs {d.name}, {len(lines)} row(s) differ:\n" + "\n".join(lines[:20]))
        # nothing lost: every inserted key no device removed by its own write is present
        final = self.keys(ref)
        parents_gone = self.gone_local["parent"] | (set(self.inserted["parent"]) - final["parent"])
        for t in TABLES:
            for k, (who, step) in sorted(self.inserted[t].items()):
                if k in final[t] or k in self.gone_local[t]:
                    continue
                why = None
                if t == "tag":
                    codes = [c for c, ks in self.codes_seen.items() if k in ks and len(ks) > 1]
                    if codes:
                        why = f"UNIQUE code {codes} shared with another row"
                if t == "child":
                    # the parent it referenced may have been deleted elsewhere (cascade of a child the deleter did not know)
                    ps = self.child_parents.get(k, set()) & parents_gone
                    why = f"its parent {sorted(ps)} was deleted" if ps else None
                if why:
                    self.note(f"missing {t} {k} excused: {why}")
                    continue
                self.problem("lost-row", f"{t} {k} inserted on {who} at step {step}, never deleted by a device's own write, missing on the reference device {ref.name}")

    def report(self, out_dir):
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, f"seed-{self.seed}.txt")
        with open(path, "w") as f:
            f.write(f"seed {self.seed} devices {self.ndev} rounds {self.rounds}\n")
            f.write(f"replay: python3 tools/chaos/cli_chaos.py --seed {self.seed} --devices {self.ndev} --rounds {self.rounds} --keep{' --mask-known' if self.mask_known else ''}{' --no-kill-other' if not self.kill_other_weight else ''}{' --no-migrate' if not self.migrate_weight else ''}\n")
            f.write(f"workdir: {self.work}\n\nPROBLEMS:\n")
            for kind, text in self.problems:
                f.write(f"- {kind}: {text}\n")
            f.write("\nSTEP LOG:\n" + "\n".join(self.log) + "\n")
        return path


def run_seed(args_tuple):
    seed, rounds, devices, binary, root, out_dir, keep, verbose, mask, kill_other, migrate = args_tuple
    work = os.path.join(root, f"seed-{seed}")
    shutil.rmtree(work, ignore_errors=True)
    rng = random.Random(seed * 7919 + 1)
    ndev = devices or rng.randint(2, 4)
    nrounds = rounds or rng.randint(25, 70)
    c = Chaos(seed, nrounds, ndev, binary, work, verbose=verbose, mask_known=mask)
    c.kill_other_weight = 1 if kill_other else 0
    c.migrate_weight = 1 if migrate else 0
    t0 = time.time()
    try:
        ok = c.run()
    except Exception:
        c.problem("harness-exception", traceback.format_exc())
        ok = False
    dt = time.time() - t0
    path = None
    if not ok:
        path = c.report(out_dir)
    elif not keep:
        shutil.rmtree(work, ignore_errors=True)
    kinds = sorted(set(k for k, _ in c.problems))
    return seed, ok, dt, path, kinds, c.kills, ndev, nrounds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, help="one seed")
    ap.add_argument("--seeds", help="a range like 1-200")
    ap.add_argument("--rounds", type=int, default=0, help="random steps per seed (default: 25-70 chosen by the seed)")
    ap.add_argument("--devices", type=int, default=0, help="devices per seed, 2-4 (default: chosen by the seed)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--bin", default=DEFAULT_BIN)
    ap.add_argument("--root", default="/tmp/rtsync-chaos/work")
    ap.add_argument("--out", default="/tmp/rtsync-chaos/reports")
    ap.add_argument("--keep", action="store_true", help="keep the work folders of passing seeds")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--no-kill-other", action="store_true",
                    help="no kill -9 of compact/backup/restore (the op sequence of harness versions before that op)")
    ap.add_argument("--no-migrate", action="store_true", help="no schema migrations (sidesteps defects 3, 4 and 7)")
    ap.add_argument("--mask-known", action="store_true",
                    help="sidestep known defect 1 (diff ids repeated by copied databases) to look for others")
    a = ap.parse_args()
    if a.seed is not None:
        seeds = [a.seed]
    elif a.seeds:
        lo, hi = a.seeds.split("-")
        seeds = list(range(int(lo), int(hi) + 1))
    else:
        seeds = [1]
    jobs = [(s, a.rounds, a.devices, a.bin, a.root, a.out, a.keep, a.verbose, a.mask_known, not a.no_kill_other, not a.no_migrate) for s in seeds]
    failed = []
    t0 = time.time()
    if a.jobs > 1:
        with ProcessPoolExecutor(a.jobs) as ex:
            results = ex.map(run_seed, jobs)
            for r in results:
                seed, ok, dt, path, kinds, kills, nd, nr = r
                print(f"seed {seed}: {'ok' if ok else 'FAIL ' + ','.join(kinds)} ({nd} devices, {nr} steps, {kills} kills, {dt:.1f}s){' ' + path if path else ''}", flush=True)
                if not ok:
                    failed.append(seed)
    else:
        for j in jobs:
            seed, ok, dt, path, kinds, kills, nd, nr = run_seed(j)
            print(f"seed {seed}: {'ok' if ok else 'FAIL ' + ','.join(kinds)} ({nd} devices, {nr} steps, {kills} kills, {dt:.1f}s){' ' + path if path else ''}", flush=True)
            if not ok:
                failed.append(seed)
    print(f"{len(seeds)} seed(s), {len(failed)} failed {failed} in {time.time() - t0:.0f}s")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
