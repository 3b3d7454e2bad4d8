import BucketClient
import Foundation

/// encryption: the same media push with client-side encryption on and off (issue #21: encrypted ≤ 1.15x plain).
///
/// `MediaSync(...).run` with direction `.push` (default options otherwise) pushes the same documents folder to an
/// empty prefix of the loopback `moto_server` and of a local folder, once through the plain store and once through
/// an `EncryptingStore` (every kind encrypted; files up to 16 MiB encrypted in memory and put once, larger ones
/// encrypted as they are stored: part by part into a multipart upload on S3, straight into the temporary file of a
/// local folder; no staging file). Plain and encrypted take turns going first. Files: 200 × 64 KiB images and
/// 2 × 16 MiB recordings with `--quick`, 1,000 × 64 KiB and 4 × 64 MiB otherwise.
func runEncryptionSuite(_ ctx: BenchContext, moto: MotoServer?, motoNote: String) async throws -> [Row] {
    let runs = min(ctx.runs, 5)
    let smallCount = ctx.quick ? 200 : 1_000
    let (bigCount, bigSize) = ctx.quick ? (2, 16 << 20) : (4, 64 << 20)
    let root = try ctx.freshDir("encryption")
    defer { try? FileManager.default.removeItem(at: root) }
    var rng = SplitMix64(seed: 0xE2C21)
    func makeDocuments(_ name: String, kind: MediaKind, count: Int, size: Int) throws -> URL {
        let docs = root.appendingPathComponent(name, isDirectory: true)
        let dir = docs.appendingPathComponent(kind.rawValue, isDirectory: true)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        for i in 0..<count { try Data(rng.bytes(size)).write(to: dir.appendingPathComponent(String(format: "media-%05d.bin", i))) }
        return docs
    }
    ctx.log("encryption: writing \(smallCount) × 64 KiB and \(bigCount) × \(bigSize >> 20) MiB files")
    let smallDocs = try makeDocuments("small", kind: .images, count: smallCount, size: 64 << 10)
    let bigDocs = try makeDocuments("big", kind: .recordings, count: bigCount, size: bigSize)
    let user = "bench"
    let keyring = ContentKeyring.generate()
    let staging = root.appendingPathComponent("staging")

    var targets: [(String, (String) throws -> any ObjectStore)] = []
    if let moto { targets.append(("moto_server", { moto.store(prefix: $0) })) }
    let folderRoot = root.appendingPathComponent("bucket")
    targets.append(("local folder", { try LocalFolderStore(root: folderRoot.appendingPathComponent($0)) }))

    /// Medians of rtsync's encrypted pushes to moto, by case label, for the rclone comparison below.
    var encryptedToMoto: [String: Stat] = [:]
    var rows: [Row] = []
    if moto == nil { rows.append(Row(suite: "encryption", name: "moto_server cases", rtsyncNote: "skipped: \(motoNote)")) }
    for (targetName, makeStore) in targets {
        for (label, docs, count) in [("push \(smallCount) × 64 KB", smallDocs, smallCount), ("push \(bigCount) × \(bigSize >> 20) MB", bigDocs, bigCount)] {
            var plainT: [Double] = [], encT: [Double] = [], plainCPU: [Double] = [], encCPU: [Double] = []
            for run in 0..<runs {
                func push(encrypted: Bool) async throws {
                    let prefix = "enc-\(UUID().uuidString.prefix(8))/"
                    let inner = try makeStore(prefix)
                    let store: any ObjectStore = encrypted
                        ? EncryptingStore(inner: inner, keyring: keyring, prefixes: ["\(user)/"], staging: staging) : inner
                    let manifest = root.appendingPathComponent("manifest-\(UUID().uuidString).json")
                    var options = MediaSyncOptions()
                    options.direction = .push
                    var report: MediaSyncReport?
                    let cpu0 = cpuSeconds()
                    let t = try await timeOnceAsync {
                        report = try await MediaSync(store: store, documents: docs, user: user, manifestURL: manifest).run(options)
                    }
                    let cpu = cpuSeconds() - cpu0
                    guard let report, report.succeeded, report.uploaded.count == count else {
                        throw BenchSQLiteError(code: 0, message: "media push (\(encrypted ? "encrypted" : "plain")) failed: \(report?.summary ?? "no report")")
                    }
                    if encrypted { encT.append(t); encCPU.append(cpu) } else { plainT.append(t); plainCPU.append(cpu) }
                    try? FileManager.default.removeItem(at: manifest)
                }
                if run % 2 == 0 { try await push(encrypted: false); try await push(encrypted: true) }
                else { try await push(encrypted: true); try await push(encrypted: false) }
                ctx.log("encryption \(targetName) \(label): run \(run + 1)/\(runs): plain \(formatTime(plainT.last!)), encrypted \(formatTime(encT.last!))")
            }
            let enc = Stat(samples: encT), plain = Stat(samples: plainT)
            if targetName == "moto_server" { encryptedToMoto[label] = enc }
            var row = Row(suite: "encryption", name: "\(label) to \(targetName)", rtsync: enc, baselineName: "same push, encryption off", baseline: plain,
                          extra: "client CPU (user+sys, median): encrypted \(formatTime(Stat(samples: encCPU).median)), plain \(formatTime(Stat(samples: plainCPU).median))",
                          aim: "encrypted ≤ 1.15x plain")
            row.aimMet = row.ratio.map { $0 <= 1.15 }
            rows.append(row)
        }
    }
    // `rclone sync` of the same kind folder to an `rclone crypt` remote (file names left plain, as rtsync's) over the
    // same moto_server, and to the plain S3 remote, each from an empty prefix.
    if let moto, let rclone = which("rclone") {
        let obscured = try runProcess(rclone, ["obscure", "rtsync-bench-passphrase"])
        guard obscured.status == 0 else { throw BenchSQLiteError(code: obscured.status, message: "rclone obscure: \(obscured.stderr)") }
        var env = moto.awsEnvironment
        for (k, v) in ["TYPE": "s3", "PROVIDER": "Other", "ENDPOINT": moto.endpoint.absoluteString, "ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"] ?? "bench",
                       "SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"] ?? "bench", "REGION": "us-east-1", "FORCE_PATH_STYLE": "true"] {
            env["RCLONE_CONFIG_BENCHS3_" + k] = v
        }
        env["RCLONE_CONFIG_BENCHENC_TYPE"] = "crypt"
        env["RCLONE_CONFIG_BENCHENC_PASSWORD"] = obscured.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        env["RCLONE_CONFIG_BENCHENC_FILENAME_ENCRYPTION"] = "off"
        env["RCLONE_CONFIG_BENCHENC_DIRECTORY_NAME_ENCRYPTION"] = "false"
        for (label, docs, kind) in [("push \(smallCount) × 64 KB", smallDocs, MediaKind.images), ("push \(bigCount) × \(bigSize >> 20) MB", bigDocs, MediaKind.recordings)] {
            var cryptT: [Double] = [], plainT: [Double] = []
            for _ in 0..<runs {
                for crypt in [true, false] {
                    let prefix = "rc-\(UUID().uuidString.prefix(8))"
                    var e = env
                    e["RCLONE_CONFIG_BENCHENC_REMOTE"] = "benchs3:\(moto.bucket)/\(prefix)"
                    let target = crypt ? "benchenc:" : "benchs3:\(moto.bucket)/\(prefix)"
                    let t = try timeOnce {
                        let r = try runProcess(rclone, ["sync", docs.appendingPathComponent(kind.rawValue).path, target], environment: e)
                        if r.status != 0 { throw BenchSQLiteError(code: r.status, message: "rclone sync: \(r.stderr.prefix(400))") }
                    }
                    if crypt { cryptT.append(t) } else { plainT.append(t) }
                }
            }
            let crypt = Stat(samples: cryptT)
            var row = Row(suite: "encryption", name: "\(label) to moto_server: rtsync encrypted vs rclone crypt", rtsync: encryptedToMoto[label],
                          baselineName: "rclone sync to an rclone crypt remote", baseline: crypt,
                          extra: "rclone sync to the plain S3 remote: \(formatTime(Stat(samples: plainT).median)) (crypt / plain: \(String(format: "%.2f", crypt.median / Stat(samples: plainT).median))x)")
            row.aimMet = nil
            rows.append(row)
        }
    } else {
        rows.append(Row(suite: "encryption", name: "rclone crypt comparison", baselineName: "rclone sync to an rclone crypt remote",
                        baselineNote: moto == nil ? "moto_server missing" : "not installed"))
    }
    return rows
}
