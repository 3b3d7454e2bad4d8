import BucketClient
import Foundation

/// media: pushing media folders to the loopback S3 server. rtsync's `MediaSync` (BucketClient) is compared with
/// `aws s3 sync` of the same folder to the same server; requests are counted from moto's access log for both.
///
/// Layout: the small files are `<documents>/images/media-NNNNN.bin`, the large ones `<documents>/recordings/...`
/// (two separate documents folders). rtsync pushes `<documents>` with `MediaSync(...).run` (direction `.push`,
/// otherwise default options: both kinds, 16 transfers at a time) to `<run prefix>/bench/<kind>/`; aws syncs the
/// kind folder itself to `<run prefix>/<kind>/`. Every push run starts from an empty prefix and (for rtsync) no
/// manifest, so every run uploads everything. The no-change re-syncs run against the prefix (and manifest) the
/// last push run filled.
func runMediaSuite(_ ctx: BenchContext, moto: MotoServer?, motoNote: String) async throws -> [Row] {
    guard let moto else {
        return [Row(suite: "media", name: "all cases", rtsyncNote: "skipped: \(motoNote)")]
    }
    let aws = which("aws")
    let runs = min(ctx.runs, 3)
    let smallCount = ctx.quick ? 200 : 1_000
    let (bigCount, bigSize) = ctx.quick ? (2, 16 << 20) : (4, 64 << 20)
    let root = try ctx.freshDir("media")
    var rng = SplitMix64(seed: 0x3ED1A)
    func makeDocuments(_ name: String, kind: MediaKind, count: Int, size: Int) throws -> URL {
        let docs = root.appendingPathComponent(name, isDirectory: true)
        let dir = docs.appendingPathComponent(kind.rawValue, isDirectory: true)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        for i in 0..<count {
            try Data(rng.bytes(size)).write(to: dir.appendingPathComponent(String(format: "media-%05d.bin", i)))
        }
        return docs
    }
    ctx.log("media: writing \(smallCount) × 64 KiB and \(bigCount) × \(bigSize >> 20) MiB files")
    let smallDocs = try makeDocuments("small", kind: .images, count: smallCount, size: 64 << 10)
    let bigDocs = try makeDocuments("big", kind: .recordings, count: bigCount, size: bigSize)
    let user = "bench"

    /// Client CPU (user + system) of the last timed aws or rtsync run: aws as a waited-for child process, rtsync as
    /// this process (nothing else runs in it meanwhile). moto_server's CPU is in neither.
    var lastClientCPU = 0.0
    /// moto_server's CPU during the same run (it serves nothing else meanwhile), when /proc shows it.
    var lastServerCPU: Double?

    func opsText(_ ops: [String: Int]) -> String {
        ops.keys.sorted().map { "\(ops[$0]!) \($0)" }.joined(separator: ", ")
    }

    /// Times `aws s3 sync` of `folder` to `prefix`; returns seconds and the server-side requests by operation.
    func awsSync(_ folder: URL, _ prefix: String) throws -> (Double, [String: Int]) {
        guard let aws else { throw BenchSQLiteError(code: 0, message: "aws not installed") }
        let before = moto.settledRequestCount()
        let cpuBefore = cpuSeconds(children: true), serverBefore = moto.serverCPUSeconds()
        defer {
            lastClientCPU = cpuSeconds(children: true) - cpuBefore
            lastServerCPU = moto.serverCPUSeconds().flatMap { after in serverBefore.map { after - $0 } }
        }
        let t = try timeOnce {
            let r = try runProcess(aws, ["--endpoint-url", moto.endpoint.absoluteString, "s3", "sync", folder.path,
                                         "s3://\(moto.bucket)/\(prefix)", "--only-show-errors", "--no-progress"], environment: moto.awsEnvironment)
            if r.status != 0 { throw BenchSQLiteError(code: r.status, message: "aws s3 sync: \(r.stderr.prefix(400))") }
        }
        _ = moto.settledRequestCount()
        return (t, moto.operations(from: before))
    }

    /// Times rtsync's MediaSync pushing `docs` to `<prefix>bench/<kind>/` (store creation included, as in a CLI run).
    func rtsyncSync(_ docs: URL, _ prefix: String, manifest: URL, kinds: Set<MediaKind>? = nil)
        async throws -> (Double, [String: Int], MediaSyncReport) {
        var options = MediaSyncOptions()
        options.direction = .push
        if let kinds { options.kinds = kinds }
        // Experiments only: RTSYNC_BENCH_MEDIA_FILES sets how many files transfer at once (default 16).
        if let files = ProcessInfo.processInfo.environment["RTSYNC_BENCH_MEDIA_FILES"].flatMap({ Int($0) }) { options.concurrency = files }
        let before = moto.settledRequestCount()
        var report: MediaSyncReport?
        let cpuBefore = cpuSeconds(), serverBefore = moto.serverCPUSeconds()
        defer {
            lastClientCPU = cpuSeconds() - cpuBefore
            lastServerCPU = moto.serverCPUSeconds().flatMap { after in serverBefore.map { after - $0 } }
        }
        let t = try await timeOnceAsync {
            let sync = try MediaSync(store: moto.store(prefix: prefix), documents: docs, user: user, manifestURL: manifest)
            report = try await sync.run(options)
        }
        _ = moto.settledRequestCount()
        guard let report, report.succeeded, report.refused.isEmpty else {
            throw BenchSQLiteError(code: 0, message: "rtsync media sync failed: \(report?.summary ?? "no report") \(report?.errors.prefix(3) ?? [])")
        }
        return (t, moto.operations(from: before), report)
    }

    var rows: [Row] = []
    var lastSmall: (prefix: String, manifest: URL, awsPrefix: String)?
    // RTSYNC_BENCH_MEDIA_CASES=big (or small) runs only that push, for profiling; the re-syncs need the small push.
    let only = ProcessInfo.processInfo.environment["RTSYNC_BENCH_MEDIA_CASES"].map { Set($0.split(separator: ",").map(String.init)) }
    for (label, docs, kind, count, tag) in [("push \(smallCount) × 64 KB", smallDocs, MediaKind.images, smallCount, "small"),
                                            ("push \(bigCount) × \(bigSize >> 20) MB", bigDocs, MediaKind.recordings, bigCount, "big")]
        where only?.contains(tag) ?? true {
        var awsT: [Double] = [], awsOps: [String: Int] = [:], rtT: [Double] = [], rtOps: [String: Int] = [:], rtClient = 0
        var awsCPU: [Double] = [], rtCPU: [Double] = [], awsServer: [Double] = [], rtServer: [Double] = []
        let folder = docs.appendingPathComponent(kind.rawValue, isDirectory: true)
        // moto keeps every object in memory, so a later push runs on a fuller server: rtsync and aws take turns
        // going first (aws first in even runs, rtsync first in odd ones), unless RTSYNC_BENCH_MEDIA_ORDER says
        // `aws-first` or `rtsync-first` for every run.
        let order = ProcessInfo.processInfo.environment["RTSYNC_BENCH_MEDIA_ORDER"]
        for run in 0..<runs {
            let awsFirst = order == "aws-first" || (order != "rtsync-first" && run % 2 == 0)
            func runAWS() throws {
                guard aws != nil else { return }
                let (t, ops) = try awsSync(folder, "aws-\(tag)-\(run)/\(kind.rawValue)/")
                awsT.append(t); awsOps = ops; awsCPU.append(lastClientCPU)
                if let server = lastServerCPU { awsServer.append(server) }
            }
            if awsFirst { try runAWS() }
            let prefix = "rt-\(tag)-\(run)/", manifest = root.appendingPathComponent("manifest-\(tag)-\(run).json")
            let (t, ops, report) = try await rtsyncSync(docs, prefix, manifest: manifest)
            rtCPU.append(lastClientCPU)
            if let server = lastServerCPU { rtServer.append(server) }
            guard report.uploaded.count == count else {
                throw BenchSQLiteError(code: 0, message: "rtsync uploaded \(report.uploaded.count) of \(count) files")
            }
            rtT.append(t); rtOps = ops; rtClient = report.requests
            if !awsFirst { try runAWS() }
            if tag == "small" { lastSmall = (prefix, manifest, "aws-\(tag)-\(run)/\(kind.rawValue)/") }
            ctx.log("media \(label): run \(run + 1)/\(runs) (\(awsFirst ? "aws" : "rtsync") first): aws \(awsT.last.map(formatTime) ?? "-") (client CPU \(awsCPU.last.map(formatTime) ?? "-"), "
                    + "server CPU \(awsServer.last.map(formatTime) ?? "-")), rtsync \(formatTime(t)) (client CPU \(formatTime(rtCPU.last!)), "
                    + "server CPU \(rtServer.last.map(formatTime) ?? "-"))")
        }
        let rt = Stat(samples: rtT)
        let awsStat = aws == nil ? nil : Stat(samples: awsT)
        var row = Row(suite: "media", name: label, rtsync: rt, baselineName: "aws s3 sync", baseline: awsStat,
                      baselineNote: aws == nil ? "not installed" : nil,
                      extra: "rtsync: \(rtOps.values.reduce(0, +)) requests (\(opsText(rtOps)); its own counter: \(rtClient)); "
                          + (aws == nil ? "aws: n/a" : "aws: \(awsOps.values.reduce(0, +)) (\(opsText(awsOps)))")
                          + "; client CPU (user+sys, median): rtsync \(formatTime(Stat(samples: rtCPU).median))"
                          + (aws == nil ? "" : ", aws \(formatTime(Stat(samples: awsCPU).median))")
                          + (rtServer.isEmpty ? "" : "; moto_server CPU (median): serving rtsync \(formatTime(Stat(samples: rtServer).median))"
                             + (awsServer.isEmpty ? "" : ", serving aws \(formatTime(Stat(samples: awsServer).median))")),
                      aim: "faster than aws s3 sync")
        if let awsStat { row.aimMet = rt.median < awsStat.median }
        rows.append(row)
    }

    // rclone and s5cmd: push, pull and no-change re-sync, in rounds of their own with rtsync (MediaPeers.swift).
    let peerCases: [(label: String, docs: URL, kind: MediaKind, count: Int, tag: String)] = [
        ("push \(smallCount) × 64 KB", smallDocs, MediaKind.images, smallCount, "small"),
        ("push \(bigCount) × \(bigSize >> 20) MB", bigDocs, MediaKind.recordings, bigCount, "big"),
    ].filter { only?.contains($0.tag) ?? true }
    if ProcessInfo.processInfo.environment["RTSYNC_BENCH_MEDIA_PEERS"] != "0" {
        rows += try await runMediaPeerCases(ctx, moto: moto, runs: runs, cases: peerCases, root: root)
    }

    // No-change re-syncs of the small folder onto what the last push run left (same prefix, same manifest).
    guard let lastSmall else { return rows }
    let pages = (smallCount + 999) / 1000
    var awsT: [Double] = [], awsOps: [String: Int] = [:]
    if aws != nil {
        for _ in 0..<ctx.runs { let (t, ops) = try awsSync(smallDocs.appendingPathComponent("images"), lastSmall.awsPrefix); awsT.append(t); awsOps = ops }
    }
    let awsStat = aws == nil ? nil : Stat(samples: awsT)
    let awsText = aws == nil ? "aws: n/a" : "aws: \(awsOps.values.reduce(0, +)) (\(opsText(awsOps)))"
    // Default kinds (images and recordings): MediaSync lists both kind folders in one listing (nothing lies between
    // them here), so one LIST page per 1,000 objects, as with `--images` only.
    for (name, kinds) in [("no-change re-sync (\(smallCount) objects), default kinds (images + recordings)", Set(MediaKind.allCases)),
                          ("no-change re-sync (\(smallCount) objects), images only (--images)", Set([MediaKind.images]))] {
        var t: [Double] = [], ops: [String: Int] = [:], unchanged = 0, transferred = 0
        for _ in 0..<ctx.runs {
            let (s, o, report) = try await rtsyncSync(smallDocs, lastSmall.prefix, manifest: lastSmall.manifest, kinds: kinds)
            t.append(s); ops = o; unchanged = report.unchanged; transferred = report.uploaded.count + report.downloaded.count
        }
        let rt = Stat(samples: t)
        let total = ops.values.reduce(0, +), lists = ops["ListObjectsV2"] ?? 0
        var row = Row(suite: "media", name: name, rtsync: rt, baselineName: "aws s3 sync", baseline: awsStat,
                      baselineNote: aws == nil ? "not installed" : nil,
                      extra: "rtsync: \(total) requests (\(opsText(ops))), \(unchanged) unchanged, \(transferred) transferred; \(awsText)",
                      aim: "faster than aws; \(pages) LIST page(s) per 1,000 objects and nothing else")
        let requestsOK = total == lists && lists == pages && transferred == 0 && unchanged == smallCount
        row.aimMet = awsStat.map { requestsOK && rt.median < $0.median }
        if !requestsOK {
            row.extra! += " [UNEXPECTED: expected \(pages) LIST and no other request]"
        }
        rows.append(row)
    }
    try? FileManager.default.removeItem(at: root)
    return rows
}
