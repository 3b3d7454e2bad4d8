#!/usr/bin/env python3
"""Fault-injecting S3 proxy + multi-device sync harness for rtsync (Python 3 standard library only).

    python3 tools/faults/sync_faults.py run --seeds 1-20            # full trials (moto), report in /tmp/rtsync-faults/
    python3 tools/faults/sync_faults.py run --seeds 5 --verbose      # one seed, print every command
    python3 tools/faults/sync_faults.py run --seeds 1-5 --server rclone
    python3 tools/faults/sync_faults.py proxy --upstream 127.0.0.1:5000 --seed 3 --rate 0.3   # standalone proxy
    # control a running proxy:  curl -XPOST localhost:PORT/__proxy/rules -d '{"rate":0.3}'  ;  GET /__proxy/stats

Every trial: a moto_server (or `rclone serve s3`), this proxy in front of it, 2-3 devices of one user (homes under
the trial folder), random edits with sqlite3 and `rtsync sync` / `rtsync compact` runs through the proxy with seeded
random faults; then, with faults off, every device syncs until a round moves nothing, and the checks run (see
`check_trial`). A trial's findings are printed and written to <out>/seed-N/findings.txt, with every command's
output in <out>/seed-N/log.txt and the proxy's fault log in <out>/seed-N/faults.txt.

Faults (chosen per request from the seed; `rules` can pin one fault to a method + path substring):
  err500 err503 slowdown  - error answer, request never forwarded
  lost                    - PUT/POST/DELETE forwarded (server stored it), answer replaced by 500 or a reset
  reset_req               - request body cut halfway, connection reset (never forwarded)
  reset_resp              - forwarded, response body cut halfway with a reset (Content-Length announced whole)
  truncate                - forwarded, body cut short with a matching Content-Length and the real status
  dup                     - forwarded twice; the client sees the first or the second answer
  delay                   - held 0.2-3 s before forwarding
  slow                    - response body dripped in small pieces
  page                    - listing forced to max-keys 1..3 (client must follow continuation tokens)
  stale                   - listing answered with the one given for the same query up to `stale_window` s ago
"""
import argparse, hashlib, http.client, http.server, json, os, random, re, shutil, signal, socket, sqlite3, struct
import subprocess, sys, threading, time, traceback, urllib.parse, zlib

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade", "trailer", "expect"}
FAULTS_ANY = ["err500", "err503", "slowdown", "delay", "reset_req"]
FAULTS_WRITE = ["lost", "dup"]
FAULTS_READ = ["reset_resp", "truncate", "slow"]
FAULTS_LIST = ["page", "stale"]


# ----------------------------------------------------------------------------------------------------------- proxy
class ProxyState:
    def __init__(self, up_host, up_port, seed, log_path=None):
        self.up_host, self.up_port = up_host, up_port
        self.seed = seed
        self.lock = threading.Lock()
        self.counter = 0
        self.rules = {"rate": 0.0, "faults": None, "pinned": [], "stale_window": 20.0, "max_delay": 3.0, "burst": 0.0}
        self.bursts = {}          # method+path -> [fault, requests left]: an outage of one object
        self.listings = {}        # query -> [(time, status, headers, body)]
        self.stats = {"requests": 0, "faults": {}, "puts_ok": {}}
        self.log = open(log_path, "a") if log_path else None

    def note(self, text):
        if self.log:
            with self.lock:
                self.log.write("%.3f %s\n" % (time.time(), text)); self.log.flush()


def make_handler(st):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def log_message(self, *a): pass

        def reply(self, status, body=b"", headers=()):
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            for k, v in headers: self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD": self.wfile.write(body)

        def reset(self):
            try:
                self.wfile.flush()
            except Exception:
                pass
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()

        def read_body(self):
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                out = b""
                while True:
                    line = self.rfile.readline()
                    n = int(line.split(b";")[0].strip(), 16)
                    if n == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""): pass
                        return out
                    out += self.rfile.read(n); self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def control(self, name, body):
            with st.lock:
                if name == "rules":
                    st.rules.update(json.loads(body or b"{}"))
                elif name == "reset":
                    st.stats = {"requests": 0, "faults": {}, "puts_ok": {}}
                    st.listings = {}
                out = json.dumps({"rules": st.rules, "stats": st.stats}).encode()
            self.reply(200, out, [("Content-Type", "application/json")])

        def forward(self, path, body):
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP and k.lower() != "host"}
            # The client signed the Host it sent (SigV4): keep it for servers that check signatures (rclone).
            headers["Host"] = self.headers.get("Host") if st.rules.get("keep_host") else "%s:%d" % (st.up_host, st.up_port)
            if body is not None and self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            conn = http.client.HTTPConnection(st.up_host, st.up_port, timeout=120)
            conn.putrequest(self.command, path, skip_host=True, skip_accept_encoding=True)
            for k, v in headers.items(): conn.putheader(k, v)
            if self.command in ("PUT", "POST"):
                conn.endheaders(body)
            else:
                conn.endheaders()
            resp = conn.getresponse()
            data = resp.read()
            hdrs = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP and (k.lower() != "content-length" or self.command == "HEAD")]
            conn.close()
            return resp.status, hdrs, data

        def choose(self, plain, query, is_list):
            """The fault for this request (None for none), from the seed and the request counter."""
            with st.lock:
                st.counter += 1
                n = st.counter
                st.stats["requests"] += 1
                rules = dict(st.rules)
            rng = random.Random("%s:%d" % (st.seed, n))
            desc = self.command + " " + plain + ("?" + query if query else "")
            for pin in rules.get("pinned") or []:
                if pin.get("method", self.command) == self.command and pin.get("path", "") in desc:
                    with st.lock:
                        left = pin.get("count", 1 << 30)
                        if left <= 0: continue
                        pin["count"] = left - 1
                    return pin["fault"], rng, n
            bkey = self.command + " " + plain
            if rules.get("rate", 0.0) > 0:
                with st.lock:
                    b = st.bursts.get(bkey)
                    if b and b[1] > 0:
                        b[1] -= 1
                        return b[0], rng, n
            if rng.random() >= rules.get("rate", 0.0):
                return None, rng, n
            options = list(FAULTS_ANY)
            if self.command in ("PUT", "POST", "DELETE"): options += FAULTS_WRITE
            if self.command in ("GET", "HEAD") and not is_list: options += FAULTS_READ
            if is_list: options += [f for f in FAULTS_LIST if not (f == "page" and rules.get("keep_host"))] * 2
            allowed = rules.get("faults")
            if allowed: options = [o for o in options if o in allowed]
            if not options: return None, rng, n
            fault = rng.choice(options)
            if fault in ("err500", "err503", "slowdown", "reset_req", "lost", "reset_resp", "truncate", "stale") and rng.random() < rules.get("burst", 0.0):
                with st.lock: st.bursts[bkey] = [fault, rng.randint(3, 20)]
            return fault, rng, n

        def handle_any(self):
            path = self.path
            if path.startswith("/__proxy/"):
                return self.control(path[len("/__proxy/"):].split("?")[0], self.read_body())
            split = path.split("?", 1)
            plain = urllib.parse.unquote(split[0])
            query = split[1] if len(split) > 1 else ""
            qs = urllib.parse.parse_qs(query, keep_blank_values=True)
            is_list = self.command == "GET" and "list-type" in qs
            fault, rng, n = self.choose(plain, query, is_list)
            body = None
            if fault == "reset_req":
                length = int(self.headers.get("Content-Length") or 0)
                if length > 1: self.rfile.read(length // 2)
                st.note("#%d %s %s %s" % (n, fault, self.command, path))
                self.count(fault)
                return self.reset()
            body = self.read_body()
            if fault == "stall":
                # a server that accepted the request and never answers (until `stall_seconds`, then a reset)
                st.note("#%d stall %s %s" % (n, self.command, path)); self.count(fault)
                time.sleep(st.rules.get("stall_seconds", 600))
                return self.reset()
            if fault in ("err500", "err503", "slowdown"):
                st.note("#%d %s %s %s" % (n, fault, self.command, path))
                self.count(fault)
                status, code = {"err500": (500, "InternalError"), "err503": (503, "ServiceUnavailable"),
                                "slowdown": (503, "SlowDown")}[fault]
                return self.reply(status, ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s</Code><Message>injected</Message></Error>" % code).encode(),
                                  [("Content-Type", "application/xml")])
            if fault == "delay":
                time.sleep(rng.uniform(0.2, st.rules.get("max_delay", 3.0)))
            fwd_path = path
            if fault == "page" and is_list:
                qs["max-keys"] = [str(rng.randint(1, 3))]
                fwd_path = split[0] + "?" + urllib.parse.urlencode({k: v[0] for k, v in qs.items()}, quote_via=urllib.parse.quote, safe="-_.~")
            if fault == "stale" and is_list:
                with st.lock:
                    olds = [e for e in st.listings.get(query, []) if time.time() - e[0] <= st.rules.get("stale_window", 20.0)]
                if olds:
                    t, status, hdrs, data = olds[0]
                    st.note("#%d stale(%.1fs old) %s %s" % (n, time.time() - t, self.command, path))
                    self.count("stale")
                    return self.send(status, hdrs, data)
                fault = None
            try:
                status, hdrs, data = self.forward(fwd_path, body)
                if fault == "dup":
                    status2, hdrs2, data2 = self.forward(fwd_path, body)
                    st.note("#%d dup %s %s -> %d then %d" % (n, self.command, path, status, status2))
                    if rng.random() < 0.5: status, hdrs, data = status2, hdrs2, data2
            except Exception as e:
                st.note("#%d upstream error %s %s: %r" % (n, self.command, path, e))
                return self.reply(502, b"upstream error")
            if self.command == "PUT" and 200 <= status < 300:
                with st.lock: st.stats["puts_ok"][plain] = st.stats["puts_ok"].get(plain, 0) + 1
            if is_list and status == 200 and fault != "page":
                with st.lock:
                    st.listings.setdefault(query, []).append((time.time(), status, hdrs, data))
                    st.listings[query] = st.listings[query][-5:]
            if fault == "lost" and 200 <= status < 300:
                st.note("#%d lost(after %d) %s %s" % (n, status, self.command, path))
                self.count("lost")
                if rng.random() < 0.5:
                    return self.reply(500, b"<Error><Code>InternalError</Code><Message>injected after the write</Message></Error>")
                return self.reset()
            if fault in ("page", "delay", "dup"):
                if fault != "dup": st.note("#%d %s %s %s" % (n, fault, self.command, fwd_path))
                self.count(fault)
            if fault in ("reset_resp", "truncate", "slow") and status in (200, 206) and len(data) > 1 and self.command == "GET":
                cut = rng.randint(0, len(data) - 1)
                st.note("#%d %s %s %s at %d/%d" % (n, fault, self.command, path, cut, len(data)))
                self.count(fault)
                if fault == "truncate":
                    return self.send(status, hdrs, data[:cut])
                if fault == "slow":
                    return self.send(status, hdrs, data, slow=rng)
                self.send_response(status)
                for k, v in hdrs: self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[:cut])
                return self.reset()
            return self.send(status, hdrs, data)

        def count(self, fault):
            with st.lock: st.stats["faults"][fault] = st.stats["faults"].get(fault, 0) + 1

        def send(self, status, hdrs, data, slow=None):
            self.send_response(status)
            for k, v in hdrs: self.send_header(k, v)
            if self.command == "HEAD":
                if not any(k.lower() == "content-length" for k, v in hdrs): self.send_header("Content-Length", "0")
                self.end_headers(); return
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if slow is None:
                self.wfile.write(data); return
            step = max(1, len(data) // 20)
            for i in range(0, len(data), step):
                self.wfile.write(data[i:i + step]); self.wfile.flush()
                time.sleep(slow.uniform(0.01, 0.15))

        def do_HEAD(self):
            # HEAD answers keep the upstream Content-Length (send() special case)
            return self.handle_any()
        do_GET = do_PUT = do_POST = do_DELETE = handle_any
    return H


def start_proxy(up_host, up_port, seed, log_path=None, port=0):
    st = ProxyState(up_host, up_port, seed, log_path)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), make_handler(st))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, st


# ---------------------------------------------------------------------------------------------------------- server
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def wait_port(port, secs=30):
    t = time.time()
    while time.time() - t < secs:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close(); return True
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("server on %d did not start" % port)


class Server:
    """moto_server or `rclone serve s3` on a free port, with bucket `BUCKET`."""
    BUCKET = "faultbkt"

    def __init__(self, kind, workdir):
        self.kind = kind
        self.port = free_port()
        self.log = open(os.path.join(workdir, "server.log"), "w")
        if kind == "moto":
            self.proc = subprocess.Popen(["moto_server", "-H", "127.0.0.1", "-p", str(self.port)], stdout=self.log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
            wait_port(self.port)
            c = http.client.HTTPConnection("127.0.0.1", self.port); c.request("PUT", "/" + self.BUCKET); r = c.getresponse(); r.read()
            assert r.status == 200, r.status
        else:
            root = os.path.join(workdir, "rclone-root"); os.makedirs(os.path.join(root, self.BUCKET))
            rc = shutil.which("rclone")
            self.proc = subprocess.Popen([rc, "serve", "s3", root, "--addr", "127.0.0.1:%d" % self.port,
                                          "--auth-key", "faultkey,faultsecret", "--force-path-style"],
                                         stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
            wait_port(self.port)

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM); self.proc.wait(10)
        except Exception:
            pass


# --------------------------------------------------------------------------------------------------------- harness
RTSYNC = os.environ.get("RTSYNC_BIN") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../.build/debug/rtsync")
CMD_TIMEOUT = 180


class Trial:
    def __init__(self, seed, args):
        self.seed = seed
        self.args = args
        self.rng = random.Random(seed)
        self.dir = os.path.join(args.out, "seed-%d" % seed)
        shutil.rmtree(self.dir, ignore_errors=True); os.makedirs(self.dir)
        self.logf = open(os.path.join(self.dir, "log.txt"), "w")
        self.findings = []
        self.ledger = {}          # key -> device that inserted it (rows never updated or deleted)
        self.deleted_ledger = set()
        self.failures = []        # (cmd, rc, stderr) of commands that failed under faults
        self.server = Server(args.server, self.dir)
        self.proxy, self.pstate = start_proxy("127.0.0.1", self.server.port, seed, os.path.join(self.dir, "faults.txt"))
        self.pport = self.proxy.server_address[1]
        self.prefix = "s%d" % seed
        self.bucket_url = "s3://%s/%s" % (Server.BUCKET, self.prefix)
        key, secret = ("faultkey", "faultsecret") if args.server == "rclone" else ("x", "y")
        self.env = dict(os.environ, AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret, AWS_REGION="us-east-1",
                        AWS_ENDPOINT_URL="http://127.0.0.1:%d" % self.pport, RTSYNC_LOCK_WAIT="5")
        self.env.pop("RTSYNC_HOME", None)
        if args.multipart: self.env["RTSYNC_S3_MULTIPART_THRESHOLD"] = "1048576"
        self.homes = {}
        if args.server == "rclone":
            # rclone checks SigV4 signatures: the Host must stay and the query cannot be rewritten (no `page`).
            self.set_rules(keep_host=True)
            self.no_page = True

    def log(self, text):
        self.logf.write(text + "\n"); self.logf.flush()
        if self.args.verbose: print(text, flush=True)

    def finding(self, text):
        self.findings.append(text)
        self.log("FINDING: " + text)

    def set_rules(self, **kw):
        with self.pstate.lock: self.pstate.rules.update(kw)

    def rt(self, argv, faulty, label=None, expect_ok=False):
        t0 = time.time()
        try:
            p = subprocess.run([RTSYNC] + argv, env=self.env, capture_output=True, text=True, timeout=CMD_TIMEOUT)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = "TIMEOUT", (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), \
                (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        dt = time.time() - t0
        self.log("$ rtsync %s   [faults %s] -> rc=%s (%.1fs)\n--stdout--\n%s\n--stderr--\n%s" % (
            " ".join(argv), "on" if faulty else "off", rc, dt, out[-6000:], err[-6000:]))
        what = label or " ".join(argv[:2])
        if rc == "TIMEOUT":
            self.finding("HANG: `%s` did not end within %ds" % (what, CMD_TIMEOUT))
        elif rc < 0 or rc >= 128:
            self.finding("CRASH: `%s` exited %s (signal/crash)\n%s" % (what, rc, err[-3000:]))
        elif rc not in (0, 1):
            self.finding("EXIT: `%s` exited %s (expected 0 or 1)\n%s" % (what, rc, err[-2000:]))
        elif rc == 1:
            lines = err.splitlines()
            errs = [l for l in lines if l.startswith("error:")]
            hints = [l for l in lines if l.startswith("hint:")]
            if not errs or not hints:
                self.finding("MESSAGE: `%s` failed (rc 1) without an `error:` + `hint:` pair:\n%s" % (what, err[-2000:]))
            self.failures.append((what, errs[:1], hints[:1], out))
            if expect_ok:
                self.finding("SETTLE-FAIL: `%s` failed with faults off:\n%s\n%s" % (what, out[-3000:], err[-3000:]))
        if rc == 0 and "--json" in argv:
            try:
                j = json.loads(out)
                if isinstance(j, dict) and j.get("ok") is False:
                    self.finding("EXIT: `%s` exited 0 but its JSON says ok=false:\n%s" % (what, out[-2000:]))
            except ValueError:
                self.finding("JSON: `%s` printed no valid JSON: %r" % (what, out[-500:]))
        return rc, out, err

    def db(self, name):
        c = sqlite3.connect(os.path.join(self.homes[name], "support", "primary.sqlite"), timeout=30)
        c.execute("PRAGMA busy_timeout=30000")
        return c

    # ---------------------------------------------------------------- setup
    def setup(self, ndev):
        names = ["A", "B", "C"][:ndev]
        for n in names: self.homes[n] = os.path.join(self.dir, "home" + n)
        self.set_rules(rate=0.0)
        rc, out, err = self.rt(["init", "--home", self.homes["A"], "--bucket", self.bucket_url, "--tier", "premium", "--json"], False)
        if rc != 0: raise RuntimeError("init A failed: " + err)
        self.user = json.loads(out)["userId"]
        c = self.db("A")
        c.executescript("""
            CREATE TABLE IF NOT EXISTS ft_items (k TEXT PRIMARY KEY NOT NULL, v TEXT, n INTEGER, dev TEXT);
            CREATE TABLE IF NOT EXISTS ft_ledger (k TEXT PRIMARY KEY NOT NULL, dev TEXT NOT NULL, payload TEXT);
        """)
        c.commit(); c.close()
        rc, out, err = self.rt(["track", "--home", self.homes["A"], "--all"], False)
        if rc != 0: raise RuntimeError("track A failed: " + err)
        keyargs = []
        self.keyargs = []
        if self.args.encrypt:
            rc, out, err = self.rt(["keys", "encrypt", "all", "--home", self.homes["A"]], False)
            if rc != 0: raise RuntimeError("keys encrypt failed: " + err)
            kf = os.path.join(self.dir, "content-keys.json")
            rc, out, err = self.rt(["keys", "export", kf, "--home", self.homes["A"]], False)
            if rc != 0: raise RuntimeError("keys export failed: " + err)
            keyargs = ["--key-file", kf]
        self.keyargs = keyargs
        rc, out, err = self.rt(["sync", "--home", self.homes["A"], "--json"], False)
        if rc != 0: raise RuntimeError("first sync A failed: " + err)
        for n in names[1:]:
            rc, out, err = self.rt(["init", "--home", self.homes[n], "--bucket", self.bucket_url, "--user", self.user, "--tier", "premium", "--json"] + keyargs, False)
            if rc != 0: raise RuntimeError("init %s failed: %s" % (n, err))
            rc, out, err = self.rt(["sync", "--home", self.homes[n], "--json"], False)
            if rc != 0: raise RuntimeError("first sync %s failed: %s" % (n, err))
        # every device must have the app tables (B/C started from A's backup)
        for n in names:
            c = self.db(n)
            c.executescript("""
                CREATE TABLE IF NOT EXISTS ft_items (k TEXT PRIMARY KEY NOT NULL, v TEXT, n INTEGER, dev TEXT);
                CREATE TABLE IF NOT EXISTS ft_ledger (k TEXT PRIMARY KEY NOT NULL, dev TEXT NOT NULL, payload TEXT);
            """); c.commit(); c.close()
        return names

    # ---------------------------------------------------------------- edits
    def edit(self, name, rnd):
        c = self.db(name)
        ops = []
        for i in range(self.rng.randint(1, 8)):
            r = self.rng.random()
            k = "k%02d" % self.rng.randint(0, 24)
            if r < 0.35:
                key = "%s-%d-%d-%d" % (name, self.seed, rnd, i)
                payload = "x" * self.rng.choice([5, 50, 500, 5000])
                c.execute("INSERT INTO ft_ledger(k, dev, payload) VALUES (?,?,?)", (key, name, payload))
                self.ledger[key] = name; ops.append("ledger+" + key)
            elif r < 0.6:
                c.execute("INSERT INTO ft_items(k, v, n, dev) VALUES (?,?,1,?) ON CONFLICT(k) DO UPDATE SET v=excluded.v, n=n+1, dev=excluded.dev",
                          (k, "v%d" % self.rng.randint(0, 999), name)); ops.append("upsert " + k)
            elif r < 0.75:
                c.execute("UPDATE ft_items SET v = ? WHERE k = ?", ("u%d" % self.rng.randint(0, 999), k)); ops.append("update " + k)
            elif r < 0.88:
                c.execute("DELETE FROM ft_items WHERE k = ?", (k,)); ops.append("delete " + k)
            elif r < 0.94:
                c.execute("INSERT OR REPLACE INTO ft_items(k, v, n, dev) VALUES (?,?,0,?)", (k, "r%d" % self.rng.randint(0, 999), name)); ops.append("replace " + k)
            else:
                # a bulk batch (makes larger diffs, >64 rows: the two-transaction export, bulk apply)
                base = "%s-%d-%d-%d-bulk" % (name, self.seed, rnd, i)
                count = self.rng.choice([70, 300, 2000, 6000])
                rows = [("%s%04d" % (base, j), name, ("%032x" % self.rng.getrandbits(128)) * (25 if count == 6000 else 1)) for j in range(count)]
                c.executemany("INSERT INTO ft_ledger(k, dev, payload) VALUES (?,?,?)", rows)
                for key, _, _ in rows: self.ledger[key] = name
                ops.append("bulk %d" % len(rows))
        c.commit(); c.close()
        self.log("edit %s: %s" % (name, ", ".join(ops)))

    # ---------------------------------------------------------------- run
    def run(self):
        t0 = time.time()
        args = self.args
        ndev = self.rng.choice([2, 3, 3]) if args.devices == 0 else args.devices
        names = self.setup(ndev)
        rate = self.rng.choice([0.05, 0.1, 0.2, 0.3, 0.5]) if args.rate is None else args.rate
        burst = self.rng.choice([0.0, 0.2, 0.5]) if args.burst is None else args.burst
        self.set_rules(burst=burst)
        faults = None
        if args.faults: faults = args.faults.split(",")
        self.log("== seed %d: %d devices, user %s, fault rate %.2f, burst %.2f, faults %s" % (self.seed, ndev, self.user, rate, burst, faults or "all"))
        late_at = self.rng.randint(2, max(2, args.rounds // 2)) if args.late else None
        for rnd in range(args.rounds):
            if rnd == late_at:
                # a device joins while the network is faulty: init --user, then its first syncs
                self.set_rules(rate=rate, faults=faults)
                n = "L"
                self.homes[n] = os.path.join(self.dir, "homeL")
                rc, out, err = self.rt(["init", "--home", self.homes[n], "--bucket", self.bucket_url, "--user", self.user,
                                        "--tier", "premium", "--json"] + self.keyargs, True, "init L")
                if rc == 0:
                    j = json.loads(out)
                    if j.get("userId") != self.user or j.get("newUser"):
                        self.finding("JOIN: `init --user %s` under faults exited 0 as user %s (source %s, newUser %s)" % (
                            self.user, j.get("userId"), j.get("source"), j.get("newUser")))
                if os.path.exists(os.path.join(self.homes[n], "support", "primary.sqlite")):
                    names.append(n)
                else:
                    # a failed init leaves no database: join again with faults off, as a user would
                    self.set_rules(rate=0.0)
                    rc, out, err = self.rt(["init", "--home", self.homes[n], "--bucket", self.bucket_url, "--user", self.user,
                                            "--tier", "premium", "--json"] + self.keyargs, False, "init L (retry)")
                    if rc == 0: names.append(n)
                continue
            name = self.rng.choice(names)
            if self.rng.random() < 0.8: self.edit(name, rnd)
            self.set_rules(rate=rate, faults=faults)
            r = self.rng.random()
            if r < 0.12:
                self.rt(["compact", "--home", self.homes[name], "--json"], True, "compact " + name)
            else:
                self.rt(["sync", "--home", self.homes[name], "--json"], True, "sync " + name)
        self.set_rules(rate=0.0, pinned=[])
        self.settle(names)
        self.check(names)
        self.log("== seed %d done in %.0fs; faults injected %s" % (self.seed, time.time() - t0, self.pstate.stats["faults"]))

    def settle(self, names):
        for rnd in range(8):
            moved = False
            for n in names:
                rc, out, err = self.rt(["sync", "--home", self.homes[n], "--json"], False, "settle sync " + n, expect_ok=True)
                try:
                    rep = json.loads(out)["report"]
                except Exception:
                    moved = True; continue
                if rep.get("uploaded") or rep.get("downloaded") or rep.get("exported") or any(a.get("status") == "applied" for a in rep.get("applied", [])):
                    moved = True
            if not moved:
                # a final compaction with faults off must work and leave every device able to catch up
                if rnd < 7 and self.rng.random() < 0.5 and not getattr(self, "_final_compact", False):
                    self._final_compact = True
                    self.rt(["compact", "--home", self.homes[names[0]], "--json"], False, "settle compact", expect_ok=True)
                    continue
                return
        self.finding("NOT-QUIET: devices still moved diffs after 8 settle rounds")

    # ---------------------------------------------------------------- checks
    def check(self, names):
        dumps = {}
        for n in names:
            c = self.db(n)
            ic = c.execute("PRAGMA integrity_check").fetchall()
            if ic != [("ok",)]: self.finding("INTEGRITY: %s: %s" % (n, ic))
            tables = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'rtsync%' AND name NOT LIKE 'sqlite%' ORDER BY name")]
            d = {}
            for t in tables:
                d[t] = sorted(map(repr, c.execute('SELECT * FROM "%s"' % t).fetchall()))
            dumps[n] = d
            got = {r[0] for r in c.execute("SELECT k FROM ft_ledger")}
            missing = sorted(set(self.ledger) - got)
            if missing: self.finding("LOST: %s lacks %d ledger row(s): %s" % (n, len(missing), missing[:10]))
            extra = sorted(got - set(self.ledger))
            if extra: self.finding("EXTRA: %s has unknown ledger row(s): %s" % (n, extra[:10]))
            # conflict log duplicates (the same loss logged twice = a diff merged twice)
            try:
                cols = [r[1] for r in c.execute("PRAGMA table_info(rtsync_conflicts)")]
                keycols = [x for x in cols if x not in ("id", "restored", "restored_at", "logged_at", "created_at", "at")]
                if keycols:
                    q = "SELECT %s, count(*) FROM rtsync_conflicts GROUP BY %s HAVING count(*) > 1" % (",".join(keycols), ",".join(keycols))
                    dup = c.execute(q).fetchall()
                    if dup: self.finding("DUP-CONFLICT: %s conflict log has duplicated entries: %s" % (n, dup[:3]))
            except sqlite3.Error as e:
                self.log("conflict check: %s" % e)
            c.close()
            rc, out, err = self.rt(["status", "--home", self.homes[n], "--json"], False, "status " + n)
            try:
                s = json.loads(out)
                for k in ("pendingChanges", "outbox", "quarantined"):
                    if s.get(k): self.finding("STATUS: %s %s=%s" % (n, k, s.get(k)))
                if s.get("gaps"): self.finding("GAPS: %s status gaps %s" % (n, s.get("gaps")))
                if s.get("catchUpPending"): self.finding("STATUS: %s catchUpPending" % n)
                if s.get("heldRows"): self.finding("STATUS: %s heldRows %s" % (n, s.get("heldRows")))
            except ValueError:
                self.finding("STATUS: %s status --json unreadable: %s" % (n, err[-500:]))
            self.debris(n)
        ref = dumps[names[0]]
        for n in names[1:]:
            for t in set(ref) | set(dumps[n]):
                a, b = ref.get(t), dumps[n].get(t)
                if a != b:
                    sa, sb = set(a or []), set(b or [])
                    self.finding("DIVERGED: table %s differs between %s and %s: only %s: %s; only %s: %s" % (
                        t, names[0], n, names[0], sorted(sa - sb)[:4], n, sorted(sb - sa)[:4]))
        self.bucket_checks()

    def debris(self, n):
        home = self.homes[n]
        odd = []
        for root, dirs, files in os.walk(home):
            rel = os.path.relpath(root, home)
            for f in files:
                p = os.path.join(rel, f)
                if rel.startswith("documents/backups") and (f.endswith(".sqlite") or f == "backups.json"): continue
                if rel == "keys" or rel.startswith("support/quarantine"): continue
                if rel == "support" and f in ("published-keys", "shared-media-checked"): continue
                if rel == "." and f == "settings.json": continue
                if rel == "support" and f in ("primary.sqlite", "primary.sqlite-wal", "primary.sqlite-shm", ".rtsync.lock", "media-manifest.json"): continue
                if rel == "documents" and f.startswith(".rtsync-media-manifest"): continue
                odd.append(p)
        if odd: self.finding("DEBRIS: %s home holds: %s" % (n, odd[:20]))

    def s3(self, method, path, query=""):
        if self.args.server == "rclone" and method == "GET" and not query:
            f = os.path.join(self.dir, "rclone-root", Server.BUCKET, path.lstrip("/"))
            return (200, open(f, "rb").read()) if os.path.isfile(f) else (404, b"")
        c = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=60)
        c.request(method, "/" + Server.BUCKET + path + ("?" + query if query else ""))
        r = c.getresponse(); d = r.read(); c.close()
        return r.status, d

    def list_all(self, prefix):
        if self.args.server == "rclone":
            root = os.path.join(self.dir, "rclone-root", Server.BUCKET)
            out = []
            for r, ds, fs in os.walk(root):
                for f in fs:
                    k = os.path.relpath(os.path.join(r, f), root)
                    if k.startswith(prefix): out.append((k, os.path.getsize(os.path.join(r, f))))
            return sorted(out)
        keys, token = [], None
        while True:
            q = {"list-type": "2", "prefix": prefix}
            if token: q["continuation-token"] = token
            st, d = self.s3("GET", "", urllib.parse.urlencode(q))
            txt = d.decode()
            for m in re.finditer(r"<Key>(.*?)</Key><LastModified>.*?</LastModified><ETag>.*?</ETag><Size>(\d+)</Size>", txt):
                keys.append((m.group(1), int(m.group(2))))
            if not keys and "<Key>" in txt:
                keys += [(k, 0) for k in re.findall(r"<Key>(.*?)</Key>", txt)]
            m = re.search(r"<NextContinuationToken>(.*?)</NextContinuationToken>", txt)
            if "<IsTruncated>true</IsTruncated>" in txt and m: token = m.group(1)
            else: return keys

    def bucket_checks(self):
        pre = self.prefix + "/" + self.user + "/"
        if self.args.server == "moto":
            st, d = self.s3("GET", "", "uploads")
            ups = re.findall(r"<Key>(.*?)</Key>", d.decode())
            ups = [u for u in ups if u.startswith(self.prefix + "/")]
            if ups: self.finding("BUCKET-DEBRIS: open multipart uploads: %s" % ups)
        keys = self.list_all(self.prefix + "/")
        self.log("bucket: %d objects: %s" % (len(keys), [k for k, _ in keys][:60]))
        seen = {}
        for k, size in keys:
            rel = k[len(pre):] if k.startswith(pre) else None
            if rel is None:
                self.finding("BUCKET: object outside the user's folder: %s" % k); continue
            if rel.startswith("inbound/"):
                name = rel[len("inbound/"):]
                if not re.fullmatch(r"[0-9A-Za-z]{27}\.sqlite", name):
                    self.finding("BUCKET-DEBRIS: odd inbound object %s" % k); continue
                st, data = self.s3("GET", "/" + k)
                if data[:7] == b"RTSYNCE": continue     # client-side encrypted: not inspected
                if data[:8] == b"RTSYNCZ1":
                    size = struct.unpack(">Q", data[8:16])[0]
                    try:
                        raw = zlib.decompress(data[16:])
                    except zlib.error as e:
                        self.finding("BUCKET: inbound %s does not expand: %s" % (k, e)); continue
                else:
                    raw = data
                tmp = os.path.join(self.dir, ".inspect.sqlite")
                open(tmp, "wb").write(raw)
                try:
                    c = sqlite3.connect("file:%s?mode=ro" % tmp, uri=True)
                    tabs = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")]
                    meta = None
                    for t in tabs:
                        if "meta" in t.lower():
                            cols = [r[1] for r in c.execute('PRAGMA table_info("%s")' % t)]
                            row = c.execute('SELECT * FROM "%s"' % t).fetchone()
                            if row: meta = dict(zip(cols, row))
                    c.close()
                except sqlite3.Error as e:
                    self.finding("BUCKET: inbound %s unreadable: %s" % (k, e)); continue
                if meta:
                    site = meta.get("author_site") or meta.get("site")
                    seq = meta.get("sequence") or meta.get("seq") or meta.get("site_sequence")
                    kind = meta.get("kind")
                    if site is not None and seq is not None and kind in (None, "changes", "diff"):
                        if (site, seq) in seen:
                            self.finding("DUP-DIFF: %s and %s carry the same site %s sequence %s" % (seen[(site, seq)], name, site, seq))
                        seen[(site, seq)] = name
            elif rel.startswith("devices/") or rel.startswith("backups/") or rel in ("snapshot.json",):
                if ".rtsync-tmp" in rel: self.finding("BUCKET-DEBRIS: %s" % k)
            else:
                self.log("bucket: other object %s" % k)
        # snapshot.json must name an existing backup
        st, d = self.s3("GET", "/" + pre + "snapshot.json")
        if st == 200:
            try:
                snap = json.loads(d)
                sk = snap.get("key") or snap.get("snapshot")
                names = {k for k, _ in keys}
                if sk and (self.prefix + "/" + sk) not in names and sk not in names:
                    self.finding("BUCKET: snapshot.json names %s, which is not in the bucket" % sk)
            except ValueError:
                self.finding("BUCKET: snapshot.json unreadable: %r" % d[:200])

    def close(self):
        try: self.proxy.shutdown()
        except Exception: pass
        self.server.stop()
        with open(os.path.join(self.dir, "findings.txt"), "w") as f:
            f.write("\n\n".join(self.findings) + "\n")
        with open(os.path.join(self.dir, "failures.json"), "w") as f:
            json.dump(self.failures, f, indent=1)


def parse_seeds(text):
    out = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-"); out += range(int(a), int(b) + 1)
        else:
            out.append(int(part))
    return out


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--seeds", default="1-5")
    r.add_argument("--rounds", type=int, default=14)
    r.add_argument("--devices", type=int, default=0, help="0: 2 or 3 chosen by the seed")
    r.add_argument("--rate", type=float, default=None, help="fault probability per request (default: chosen by the seed)")
    r.add_argument("--faults", default=None, help="comma-separated subset of faults")
    r.add_argument("--burst", type=float, default=None, help="probability that a fault repeats for the next 3-20 requests of that object (an outage)")
    r.add_argument("--server", default="moto", choices=["moto", "rclone"])
    r.add_argument("--multipart", action="store_true", help="RTSYNC_S3_MULTIPART_THRESHOLD=1 MiB")
    r.add_argument("--late", action="store_true", help="a device L joins (init --user, first syncs) while faults are on")
    r.add_argument("--encrypt", action="store_true", help="client-side encryption of every kind (keys exported from A, B/C init --key-file)")
    r.add_argument("--out", default="/tmp/rtsync-faults")
    r.add_argument("--verbose", action="store_true")
    p = sub.add_parser("proxy")
    p.add_argument("--upstream", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rate", type=float, default=0.0)
    p.add_argument("--faults", default=None)
    p.add_argument("--pin", action="append", default=[], help='JSON pinned rule, e.g. {"fault":"lost","method":"PUT","path":"/inbound/","count":1}')
    p.add_argument("--log", default=None)
    a = ap.parse_args()
    if a.cmd == "proxy":
        h, port = a.upstream.rsplit(":", 1)
        srv, st = start_proxy(h, int(port), a.seed, a.log, a.port)
        st.rules.update(rate=a.rate, faults=a.faults.split(",") if a.faults else None, pinned=[json.loads(x) for x in a.pin])
        print(srv.server_address[1], flush=True)
        while True: time.sleep(3600)
    os.makedirs(a.out, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *x: (_ for _ in ()).throw(KeyboardInterrupt()))   # stop the trial's server too
    summary = []
    for seed in parse_seeds(a.seeds):
        t = None
        try:
            t = Trial(seed, a)
            t.run()
        except KeyboardInterrupt:
            if t: t.close()
            raise
        except Exception:
            if t: t.finding("HARNESS: " + traceback.format_exc())
            else: print(traceback.format_exc())
        finally:
            if t:
                t.close()
                line = "seed %d: %d finding(s), %d failed command(s) under faults" % (seed, len(t.findings), len(t.failures))
                print(line, flush=True)
                shown = set()
                for f in t.findings:
                    kind = f.split(":", 1)[0] + (" compact" if "`compact" in f else "")
                    if kind.startswith("MESSAGE") and kind in shown: continue
                    shown.add(kind)
                    print("   " + f.replace("\n", "\n   ")[:1500], flush=True)
                summary.append((seed, t.findings))
    with open(os.path.join(a.out, "summary.json"), "a") as f:
        json.dump(summary, f); f.write("\n")


if __name__ == "__main__":
    main()
