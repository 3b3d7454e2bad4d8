import BucketClient
import Foundation

/// media: pushing media folders to the loopback S3 server. rtsync's media sync is compared with
/// `aws s3 sync` (and rclone / s5cmd when installed); requests are counted from moto's access log.
///
/// rtsync's MediaSync is not in Sources/BucketClient yet, so its column reads "not built yet". When it lands,
/// replace `rtsyncMediaSync` below with a call to it. Meanwhile one extra, clearly labelled row per push
/// times BucketClient's S3Store putting the same files (4 at a time): the transfer layer media sync will use,
/// not media sync itself, and with no aim attached.
let rtsyncMediaSync: ((S3Store, URL) async throws -> Void)? = nil

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
    func makeFolder(_ name: String, count: Int, size: Int) throws -> URL {
        let dir = root.appendingPathComponent(name, isDirectory: true)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        for i in 0..<count {
            try Data(rng.bytes(size)).write(to: dir.appendingPathComponent(String(format: "media-%05d.bin", i)))
        }
        return dir
    }
    ctx.log("media: writing \(smallCount) × 64 KiB and \(bigCount) × \(bigSize >> 20) MiB files")
    let small = try makeFolder("small", count: smallCount, size: 64 << 10)
    let big = try makeFolder("big", count: bigCount, size: bigSize)

    /// Times `aws s3 sync` of `folder` to `prefix`; returns seconds and server-side requests.
    func awsSync(_ folder: URL, _ prefix: String) throws -> (Double, Int) {
        guard let aws else { throw BenchSQLiteError(code: 0, message: "aws not installed") }
        let before = moto.totalRequests()
        let t = try timeOnce {
            let r = try runProcess(aws, ["--endpoint-url", moto.endpoint.absoluteString, "s3", "sync", folder.path,
                                         "s3://\(moto.bucket)/\(prefix)", "--only-show-errors", "--no-progress"], environment: moto.awsEnvironment)
            if r.status != 0 { throw BenchSQLiteError(code: r.status, message: "aws s3 sync: \(r.stderr.prefix(400))") }
        }
        return (t, moto.totalRequests() - before)
    }

    /// BucketClient's S3Store putting every file of `folder`, 4 at a time.
    func storePuts(_ folder: URL, _ prefix: String) async throws -> (Double, Int) {
        let store = moto.store(prefix: prefix)
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        let before = moto.totalRequests()
        let t = try await timeOnceAsync {
            try await withThrowingTaskGroup(of: Void.self) { group in
                var next = 0
                func add() {
                    let name = files[next]; next += 1
                    group.addTask { _ = try await store.put(key: name, fileURL: folder.appendingPathComponent(name)) }
                }
                while next < min(4, files.count) { add() }
                while try await group.next() != nil { if next < files.count { add() } }
            }
        }
        return (t, moto.totalRequests() - before)
    }

    var rows: [Row] = []
    let installed = ["rclone", "s5cmd"].map { ($0, which($0)) }
    for (label, folder, tag) in [("push \(smallCount) × 64 KB", small, "small"), ("push \(bigCount) × \(bigSize >> 20) MB", big, "big")] {
        var awsT: [Double] = [], awsReq = 0, putT: [Double] = [], putReq = 0
        for run in 0..<runs {
            if aws != nil { let (t, r) = try awsSync(folder, "aws-\(tag)-\(run)/"); awsT.append(t); awsReq = r }
            let (t, r) = try await storePuts(folder, "puts-\(tag)-\(run)/"); putT.append(t); putReq = r
            ctx.log("media \(label): run \(run + 1)/\(runs)")
        }
        let awsStat = aws == nil ? nil : Stat(samples: awsT)
        let awsNote = aws == nil ? "not installed" : nil
        rows.append(Row(suite: "media", name: label, rtsyncNote: rtsyncMediaSync == nil ? "not built yet" : nil, baselineName: "aws s3 sync",
                        baseline: awsStat, baselineNote: awsNote, extra: aws == nil ? nil : "aws: \(awsReq) requests",
                        aim: "faster than aws s3 sync"))
        for (tool, path) in installed where path == nil {
            rows.append(Row(suite: "media", name: label, rtsyncNote: "not built yet", baselineName: "\(tool) sync", baselineNote: "not installed"))
        }
        rows.append(Row(suite: "media", name: "\(label) [S3Store.put ×4 concurrent: transfer layer only, not media sync]",
                        rtsync: Stat(samples: putT), baselineName: "aws s3 sync", baseline: awsStat, baselineNote: awsNote,
                        extra: "puts: \(putReq) requests; aws: \(aws == nil ? "n/a" : String(awsReq))"))
    }
    // No-change re-sync of the small folder onto the prefix the last aws run filled.
    if aws != nil {
        var t: [Double] = [], req = 0
        for _ in 0..<runs { let (s, r) = try awsSync(small, "aws-small-\(runs - 1)/"); t.append(s); req = r }
        let pages = (smallCount + 999) / 1000
        rows.append(Row(suite: "media", name: "no-change re-sync (\(smallCount) objects)", rtsyncNote: "not built yet", baselineName: "aws s3 sync",
                        baseline: Stat(samples: t), extra: "aws: \(req) requests; aim for rtsync: \(pages) LIST",
                        aim: "faster than aws; \(pages) LIST page(s) and nothing else"))
    } else {
        rows.append(Row(suite: "media", name: "no-change re-sync", rtsyncNote: "not built yet", baselineName: "aws s3 sync", baselineNote: "not installed"))
    }
    try? FileManager.default.removeItem(at: root)
    return rows
}
