import BucketClient
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A loopback `moto_server` started for one benchmark run. Requests are counted server-side from its
/// access log, so rtsync's and the AWS CLI's requests are counted the same way.
final class MotoServer: @unchecked Sendable {
    let port: Int
    let bucket = "bench"
    let process: Process
    let logURL: URL
    var endpoint: URL { URL(string: "http://127.0.0.1:\(port)")! }

    /// Starts moto_server on a free port and creates the bucket; nil (with a reason) when it cannot.
    static func start(scratch: URL) async -> (MotoServer?, String) {
        guard let moto = which("moto_server") else { return (nil, "moto_server not installed") }
        guard let port = freePort() else { return (nil, "no free port") }
        let log = scratch.appendingPathComponent("moto-\(port).log")
        FileManager.default.createFile(atPath: log.path, contents: nil)
        guard let handle = try? FileHandle(forWritingTo: log) else { return (nil, "cannot write \(log.path)") }
        // A watchdog shell ends moto when this harness ends, even if it is killed (moto can ignore SIGTERM).
        let script = """
        "$0" -H 127.0.0.1 -p \(port) &
        M=$!
        trap 'kill -9 $M 2>/dev/null; exit 0' TERM INT EXIT
        while kill -0 \(getpid()) 2>/dev/null && kill -0 $M 2>/dev/null; do sleep 0.5; done
        """
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", script, moto]
        p.standardOutput = handle
        p.standardError = handle
        do { try p.run() } catch { return (nil, "moto_server failed to start: \(error)") }
        let server = MotoServer(port: port, process: p, logURL: log)
        // Wait until it answers, then create the bucket (moto needs no auth).
        for _ in 0..<100 {
            if await server.request("PUT", "/\(server.bucket)") == 200 { return (server, "moto_server on 127.0.0.1:\(port)") }
            try? await Task.sleep(for: .milliseconds(100))
        }
        server.stop()
        return (nil, "moto_server did not answer on port \(port)")
    }

    private init(port: Int, process: Process, logURL: URL) {
        self.port = port
        self.process = process
        self.logURL = logURL
    }

    func stop() {
        // moto_server may ignore SIGTERM when started from here; give it a moment, then SIGKILL.
        if process.isRunning { process.terminate() }
        for _ in 0..<20 where process.isRunning { usleep(50_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        for _ in 0..<40 where process.isRunning { usleep(50_000) }
        try? FileManager.default.removeItem(at: logURL)
    }

    /// HTTP status of one unsigned request, or nil when the server is not reachable.
    func request(_ method: String, _ path: String) async -> Int? {
        var req = URLRequest(url: endpoint.appendingPathComponent(path))
        req.httpMethod = method
        req.timeoutInterval = 2
        guard let (_, resp) = try? await URLSession.shared.data(for: req) else { return nil }
        return (resp as? HTTPURLResponse)?.statusCode
    }

    /// Requests logged so far, by method (moto logs one line per request).
    func requestCounts() -> [String: Int] {
        guard let text = try? String(contentsOf: logURL, encoding: .utf8) else { return [:] }
        var out: [String: Int] = [:]
        for line in text.split(separator: "\n") {
            guard let q = line.firstIndex(of: "\"") else { continue }
            let rest = line[line.index(after: q)...]
            guard let sp = rest.firstIndex(of: " ") else { continue }
            let method = String(rest[..<sp])
            if ["GET", "PUT", "POST", "HEAD", "DELETE"].contains(method) { out[method, default: 0] += 1 }
        }
        return out
    }

    func totalRequests() -> Int { requestCounts().values.reduce(0, +) }

    /// Every logged request as (method, request target), in log order.
    func requestLines() -> [(method: String, target: String)] {
        guard let text = try? String(contentsOf: logURL, encoding: .utf8) else { return [] }
        var out: [(String, String)] = []
        for line in text.split(separator: "\n") {
            guard let q = line.firstIndex(of: "\"") else { continue }
            let parts = line[line.index(after: q)...].split(separator: " ", maxSplits: 2)
            guard parts.count >= 2, ["GET", "PUT", "POST", "HEAD", "DELETE"].contains(String(parts[0])) else { continue }
            out.append((String(parts[0]), String(parts[1])))
        }
        return out
    }

    /// Number of logged requests once the log has stopped growing (moto may write a line just after
    /// answering, so a count taken the instant a client returns can be short by the last request or two).
    func settledRequestCount() -> Int {
        var last = requestLines().count
        for _ in 0..<40 {
            usleep(50_000)
            let now = requestLines().count
            if now == last { return now }
            last = now
        }
        return last
    }

    /// S3 operation names of logged requests `from..<end` (from the method and the request target), with counts.
    func operations(from start: Int) -> [String: Int] {
        var out: [String: Int] = [:]
        for (method, target) in requestLines().dropFirst(start) {
            let path = target.split(separator: "?", maxSplits: 1).first.map(String.init) ?? target
            let query = target.contains("?") ? String(target.split(separator: "?", maxSplits: 1)[1]) : ""
            let bucketLevel = path.split(separator: "/").count <= 1
            let op: String
            switch method {
            case "GET": op = bucketLevel ? (query.contains("list-type=2") ? "ListObjectsV2" : "ListObjects") : (query.contains("uploadId=") ? "ListParts" : "GetObject")
            case "PUT": op = bucketLevel ? "PutBucket" : (query.contains("uploadId=") ? "UploadPart" : "PutObject")
            case "POST": op = query.contains("uploads") && !query.contains("uploadId=") ? "CreateMultipartUpload" : (query.contains("uploadId=") ? "CompleteMultipartUpload" : "POST")
            case "HEAD": op = bucketLevel ? "HeadBucket" : "HeadObject"
            case "DELETE": op = query.contains("uploadId=") ? "AbortMultipartUpload" : "DeleteObject"
            default: op = method
            }
            out[op, default: 0] += 1
        }
        return out
    }

    /// CPU time (user + system, seconds) moto_server has used so far, from /proc (nil where that is unavailable).
    /// moto runs as the child of the watchdog shell started here.
    func serverCPUSeconds() -> Double? {
        let shell = process.processIdentifier
        guard let children = try? String(contentsOfFile: "/proc/\(shell)/task/\(shell)/children", encoding: .utf8),
              let pid = children.split(separator: " ").first,
              let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        // Fields after "(comm)": state is field 3; utime and stime are fields 14 and 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// A store on `prefix`, with the library's default tuning unless RTSYNC_BENCH_PART_MIB,
    /// RTSYNC_BENCH_S3_CONCURRENCY, RTSYNC_BENCH_S3_DIRECT=0 (everything through URLSession, not libcurl
    /// directly) / =all (every PUT and POST through libcurl), RTSYNC_BENCH_PART_CHECKSUM=none (multipart
    /// uploads declare no CRC-32 part checksums) or RTSYNC_BENCH_S3_RANGED=1 (large listed objects fetched in
    /// ranged GETs) ask otherwise (for experiments only).
    func store(prefix: String) -> S3Store {
        var configuration = S3Configuration(bucket: bucket, prefix: prefix, region: "us-east-1", endpoint: endpoint,
                                            addressingStyle: .path, credentials: AWSCredentials(accessKeyId: "bench", secretAccessKey: "bench"))
        let env = ProcessInfo.processInfo.environment
        if let mib = env["RTSYNC_BENCH_PART_MIB"].flatMap({ Int($0) }) { configuration.partSize = mib << 20 }
        if let n = env["RTSYNC_BENCH_S3_CONCURRENCY"].flatMap({ Int($0) }) { configuration.maxConcurrency = n }
        if env["RTSYNC_BENCH_S3_DIRECT"] == "0" { configuration.directTransportMinimumBody = nil }
        if env["RTSYNC_BENCH_S3_DIRECT"] == "all" { configuration.directTransportMinimumBody = 0 }
        if env["RTSYNC_BENCH_S3_RANGED"] == "1" { configuration.rangedDownloads = true }
        if env["RTSYNC_BENCH_PART_CHECKSUM"] == "none" { configuration.partChecksum = .off }
        return S3Store(configuration: configuration)
    }

    /// Environment for the AWS CLI against this server (no user config, no instance metadata lookups).
    var awsEnvironment: [String: String] {
        var env = ProcessInfo.processInfo.environment
        env["AWS_ACCESS_KEY_ID"] = "bench"
        env["AWS_SECRET_ACCESS_KEY"] = "bench"
        env["AWS_DEFAULT_REGION"] = "us-east-1"
        env["AWS_EC2_METADATA_DISABLED"] = "true"
        env["AWS_CONFIG_FILE"] = "/dev/null"
        env["AWS_SHARED_CREDENTIALS_FILE"] = "/dev/null"
        env["AWS_PAGER"] = ""
        return env
    }

    /// A free TCP port on 127.0.0.1 (bind to port 0 and read back what the kernel chose).
    static func freePort() -> Int? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = 0
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sp in
                bind(fd, sp, len) == 0 && getsockname(fd, sp, &len) == 0
            }
        }
        return ok ? Int(UInt16(bigEndian: addr.sin_port)) : nil
    }
}
