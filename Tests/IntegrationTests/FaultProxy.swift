import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import RTSyncTestSupport
import Testing

/// A loopback HTTP proxy in front of the S3 server (moto) that injects the faults a real server cannot be asked for:
/// 5xx answers to chosen uploads, answers lost after the server stored the object, connections reset in the middle
/// of a request or response body, and uploads held until the test releases them. It counts the uploads that reached
/// the server, so a test can check that a re-run sends only what was left.
///
/// Control (JSON over `/__proxy/…` on the same port): POST `rules` sets ``Rules``, GET `stats` gives the completed
/// PUTs per object path, POST `reset` clears the counts, GET `held` counts requests waiting, POST `release` lets
/// them go on.
struct LTFaultProxy: Sendable {
    let port: Int
    let upstream: URL
    var endpoint: URL { URL(string: "http://127.0.0.1:\(port)")! }

    /// What to break; every field off by default.
    struct Rules: Encodable {
        /// PUTs whose path contains one of these always get 503 without reaching the server.
        var fail503: [String] = []
        /// PUTs whose path contains one of these reach the server (the object is stored), then the client gets 503.
        var loseAnswer: [String] = []
        /// The first PUT of each object path that no rule above takes is cut off halfway through its body with a reset
        /// (its retry goes through).
        var resetFirstPut = false
        /// The first GET of each object is cut off halfway through the answer's body with a reset (its retry goes
        /// through).
        var resetFirstGet = false
        /// Requests (method and path, e.g. `PUT /bucket/user/backups/`) containing this wait until `release`.
        var hold: String? = nil
    }

    /// Starts a proxy to `upstream`.
    static func start(upstream: URL) async throws -> LTFaultProxy {
        guard let python = findExecutable("python3") else { throw TestSetupError("python3 not found on PATH") }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = ["-c", script, String(getpid()), upstream.host ?? "127.0.0.1", String(upstream.port ?? 80)]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardInput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        LTChildren.register(process)
        let line = String(decoding: pipe.fileHandleForReading.availableData, as: UTF8.self)
        guard let port = Int(line.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw TestSetupError("fault proxy did not start: \(line)")
        }
        return LTFaultProxy(port: port, upstream: upstream)
    }

    /// The environment of a device that reaches the bucket through this proxy.
    func environment(_ base: [String: String]) -> [String: String] {
        var env = base
        env["AWS_ENDPOINT_URL"] = endpoint.absoluteString
        return env
    }

    private func control(_ method: String, _ name: String, body: Data? = nil) async throws -> Data {
        var request = URLRequest(url: endpoint.appendingPathComponent("__proxy").appendingPathComponent(name))
        request.httpMethod = method
        request.httpBody = body
        let (data, response) = try await URLSession.shared.data(for: request)
        try #require((response as? HTTPURLResponse)?.statusCode == 200, "fault proxy \(name): \(String(decoding: data, as: UTF8.self))")
        return data
    }

    /// Replaces the rules.
    func set(_ rules: Rules) async throws { _ = try await control("POST", "rules", body: try JSONEncoder().encode(rules)) }

    /// PUTs the server answered with 2xx since the last ``resetCounts()``, by object path (query left out), and
    /// the number of faults injected.
    func stats() async throws -> (puts: [String: Int], faults: Int) {
        let json = try JSONSerialization.jsonObject(with: try await control("GET", "stats")) as? [String: Any] ?? [:]
        return ((json["puts"] as? [String: Int]) ?? [:], (json["faults"] as? Int) ?? 0)
    }

    /// Clears the counts.
    func resetCounts() async throws { _ = try await control("POST", "reset") }

    /// Requests waiting on the `hold` rule.
    func held() async throws -> Int {
        let json = try JSONSerialization.jsonObject(with: try await control("GET", "held")) as? [String: Any] ?? [:]
        return (json["held"] as? Int) ?? 0
    }

    /// Lets held requests go on (and holds no more).
    func release() async throws { _ = try await control("POST", "release") }

    static let script = #"""
    import http.client, http.server, json, os, socket, struct, sys, threading, time, urllib.parse
    parent, up_host, up_port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    lock = threading.Lock()
    state = {"rules": {}, "puts": {}, "faults": 0, "held": 0, "seen_put": set(), "seen_get": set()}
    gate = threading.Event(); gate.set()
    HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade", "trailer"}
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
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
        def control(self, name, body):
            with lock:
                if name == "rules":
                    state["rules"] = json.loads(body or b"{}")
                    if state["rules"].get("hold"): gate.clear()
                elif name == "reset":
                    state["puts"] = {}; state["faults"] = 0; state["seen_put"] = set(); state["seen_get"] = set()
                elif name == "release":
                    state["rules"]["hold"] = None; gate.set()
                out = {"puts": state["puts"], "faults": state["faults"], "held": state["held"]}
            self.reply(200, json.dumps(out).encode(), [("Content-Type", "application/json")])
        def handle_any(self):
            length = int(self.headers.get("Content-Length") or 0)
            path = self.path
            if path.startswith("/__proxy/"):
                return self.control(path[len("/__proxy/"):], self.rfile.read(length))
            plain = urllib.parse.unquote(path.split("?")[0])
            rules = state["rules"]
            is_object = plain.count("/") >= 2 and not plain.endswith("/")
            with lock:
                first_put = self.command == "PUT" and plain not in state["seen_put"]
                if self.command == "PUT": state["seen_put"].add(plain)
                first_get = self.command == "GET" and is_object and plain not in state["seen_get"]
                if first_get: state["seen_get"].add(plain)
            hold = rules.get("hold")
            if hold and hold in self.command + " " + plain:
                with lock: state["held"] += 1
                gate.wait()
                with lock: state["held"] -= 1
            lose = False
            if self.command == "PUT":
                if any(p in plain for p in rules.get("fail503", [])):
                    self.rfile.read(length)
                    with lock: state["faults"] += 1
                    return self.reply(503, b"<Error><Code>ServiceUnavailable</Code><Message>injected</Message></Error>")
                lose = any(p in plain for p in rules.get("loseAnswer", []))
                if not lose and rules.get("resetFirstPut") and first_put and length > 1:
                    self.rfile.read(length // 2)
                    with lock: state["faults"] += 1
                    return self.reset()
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP and k.lower() != "host"}
            headers["Host"] = "%s:%d" % (up_host, up_port)
            conn = http.client.HTTPConnection(up_host, up_port, timeout=120)
            conn.request(self.command, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            if self.command == "PUT" and 200 <= resp.status < 300:
                with lock: state["puts"][plain] = state["puts"].get(plain, 0) + 1
            if lose and 200 <= resp.status < 300:
                with lock: state["faults"] += 1
                return self.reply(503, b"<Error><Code>InternalError</Code><Message>injected after the write</Message></Error>")
            cut = rules.get("resetFirstGet") and first_get and len(data) > 1 and resp.status in (200, 206)
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in HOP and k.lower() != "content-length": self.send_header(k, v)
            if self.command == "HEAD":
                self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
                self.end_headers()
                return
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if cut:
                self.wfile.write(data[: len(data) // 2]); self.wfile.flush()
                with lock: state["faults"] += 1
                return self.reset()
            self.wfile.write(data)
        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    print(srv.server_address[1], flush=True)
    def watchdog():
        while True:
            try: os.kill(parent, 0)
            except OSError: os._exit(0)
            time.sleep(0.5)
    threading.Thread(target=watchdog, daemon=True).start()
    srv.serve_forever()
    """#
}
