import BucketClient
import Foundation

/// encryption: the same media push with client-side encryption on and off (issue #21: encrypted ≤ 1.15x plain).
///
/// `MediaSync(...).run` with direction `.push` (default options otherwise) pushes the same documents folder to an
/// empty prefix of the loopback `moto_server` and of a local folder, once through the plain store and once through
/// an `EncryptingStore` (every kind encrypted; files encrypted chunk by chunk into a staging folder, then uploaded,
/// multipart for the large ones). Plain and encrypted take turns going first. Files: 200 × 64 KiB images and
/// 2 × 16 MiB recordings with `--quick`, 1,000 × 64 KiB and 4 × 64 MiB otherwise.
func runEncryptionSuite(_ ctx: BenchContext, moto: MotoServer?, motoNote: String) async throws -> [Row] {
    let runs = min(ctx.runs, 3)
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
            var row = Row(suite: "encryption", name: "\(label) to \(targetName)", rtsync: enc, baselineName: "same push, encryption off", baseline: plain,
                          extra: "client CPU (user+sys, median): encrypted \(formatTime(Stat(samples: encCPU).median)), plain \(formatTime(Stat(samples: plainCPU).median))",
                          aim: "encrypted ≤ 1.15x plain")
            row.aimMet = row.ratio.map { $0 <= 1.15 }
            rows.append(row)
        }
    }
    return rows
}
