import Foundation

// MARK: - Deterministic data

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and the same sequence on every machine for a seed.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// `count` pseudo-random bytes.
    mutating func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { raw in
            var i = 0
            while i + 8 <= count { raw.storeBytes(of: next(), toByteOffset: i, as: UInt64.self); i += 8 }
            if i < count { var last = next(); while i < count { raw[i] = UInt8(truncatingIfNeeded: last); last >>= 8; i += 1 } }
        }
        return out
    }

    private static let alphabet = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".utf8)
    /// A random alphanumeric string (KSUID-like keys, names, notes).
    mutating func word(_ length: Int) -> String {
        var b = [UInt8](repeating: 0, count: length)
        for i in 0..<length { b[i] = Self.alphabet[Int(next() % UInt64(Self.alphabet.count))] }
        return String(decoding: b, as: UTF8.self)
    }
}

// MARK: - Measurement

/// Median and min of repeated timings (seconds).
struct Stat: Codable {
    var samples: [Double]
    var median: Double {
        let s = samples.sorted()
        guard !s.isEmpty else { return .nan }
        return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
    }
    var min: Double { samples.min() ?? .nan }

    enum CodingKeys: String, CodingKey { case samples, median, min }
    init(samples: [Double]) { self.samples = samples }
    init(from decoder: Decoder) throws { samples = try decoder.container(keyedBy: CodingKeys.self).decode([Double].self, forKey: .samples) }
    func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(samples, forKey: .samples)
        try c.encode(median, forKey: .median)
        try c.encode(min, forKey: .min)
    }
}

let benchClock = ContinuousClock()

func seconds(_ d: Duration) -> Double {
    let c = d.components
    return Double(c.seconds) + Double(c.attoseconds) / 1e18
}

/// Times `body` once.
func timeOnce(_ body: () throws -> Void) rethrows -> Double {
    let start = benchClock.now
    try body()
    return seconds(benchClock.now - start)
}

func timeOnceAsync(_ body: () async throws -> Void) async rethrows -> Double {
    let start = benchClock.now
    try await body()
    return seconds(benchClock.now - start)
}

/// Runs `runs` repetitions; `setup` (untimed) prepares state for one repetition, `body` is timed.
func measure<S>(runs: Int, setup: (Int) throws -> S, _ body: (S) throws -> Void, teardown: (S) throws -> Void = { _ in }) throws -> Stat {
    var samples: [Double] = []
    for i in 0..<runs {
        let state = try setup(i)
        samples.append(try timeOnce { try body(state) })
        try teardown(state)
    }
    return Stat(samples: samples)
}

// MARK: - Results

/// One line of a suite's table. Absent sides carry a note ("not built yet", "not installed", ...).
struct Row: Codable {
    var suite: String
    var name: String
    var rtsync: Stat?
    var rtsyncNote: String?
    var baselineName: String?
    var baseline: Stat?
    var baselineNote: String?
    /// Size / requests column.
    var extra: String?
    /// The aim as written in the issue.
    var aim: String?
    /// Whether this run met it (nil: no aim, or nothing to judge).
    var aimMet: Bool?

    var ratio: Double? {
        guard let r = rtsync?.median, let b = baseline?.median, b > 0 else { return nil }
        return r / b
    }

    enum CodingKeys: String, CodingKey { case suite, name, rtsync, rtsyncNote, baselineName, baseline, baselineNote, extra, aim, aimMet, ratio }
    init(suite: String, name: String, rtsync: Stat? = nil, rtsyncNote: String? = nil, baselineName: String? = nil, baseline: Stat? = nil,
         baselineNote: String? = nil, extra: String? = nil, aim: String? = nil, aimMet: Bool? = nil) {
        self.suite = suite; self.name = name; self.rtsync = rtsync; self.rtsyncNote = rtsyncNote
        self.baselineName = baselineName; self.baseline = baseline; self.baselineNote = baselineNote
        self.extra = extra; self.aim = aim; self.aimMet = aimMet
    }
    init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        suite = try c.decode(String.self, forKey: .suite); name = try c.decode(String.self, forKey: .name)
        rtsync = try c.decodeIfPresent(Stat.self, forKey: .rtsync); rtsyncNote = try c.decodeIfPresent(String.self, forKey: .rtsyncNote)
        baselineName = try c.decodeIfPresent(String.self, forKey: .baselineName); baseline = try c.decodeIfPresent(Stat.self, forKey: .baseline)
        baselineNote = try c.decodeIfPresent(String.self, forKey: .baselineNote); extra = try c.decodeIfPresent(String.self, forKey: .extra)
        aim = try c.decodeIfPresent(String.self, forKey: .aim); aimMet = try c.decodeIfPresent(Bool.self, forKey: .aimMet)
    }
    func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(suite, forKey: .suite); try c.encode(name, forKey: .name)
        try c.encodeIfPresent(rtsync, forKey: .rtsync); try c.encodeIfPresent(rtsyncNote, forKey: .rtsyncNote)
        try c.encodeIfPresent(baselineName, forKey: .baselineName); try c.encodeIfPresent(baseline, forKey: .baseline)
        try c.encodeIfPresent(baselineNote, forKey: .baselineNote); try c.encodeIfPresent(extra, forKey: .extra)
        try c.encodeIfPresent(aim, forKey: .aim); try c.encodeIfPresent(aimMet, forKey: .aimMet)
        try c.encodeIfPresent(ratio, forKey: .ratio)
    }
}

func formatTime(_ s: Double) -> String {
    if s.isNaN { return "-" }
    if s < 1e-3 { return String(format: "%.0f µs", s * 1e6) }
    if s < 1 { return String(format: "%.1f ms", s * 1e3) }
    return String(format: "%.2f s", s)
}

func formatBytes(_ b: Double) -> String {
    if b < 1024 { return String(format: "%.0f B", b) }
    if b < 1024 * 1024 { return String(format: "%.1f KiB", b / 1024) }
    if b < 1024 * 1024 * 1024 { return String(format: "%.1f MiB", b / 1024 / 1024) }
    return String(format: "%.2f GiB", b / 1024 / 1024 / 1024)
}

func statCell(_ s: Stat?, _ note: String?) -> String {
    if let s { return "\(formatTime(s.median)) (min \(formatTime(s.min)))" }
    return note ?? "-"
}

func aimCell(_ r: Row) -> String {
    guard let aim = r.aim else { return "" }
    switch r.aimMet {
    case true?: return aim + " — met"
    case false?: return aim + " — NOT met"
    case nil: return aim + " — not measured"
    }
}

/// The table of one suite, as Markdown (readable in a terminal and pasteable into the README).
func renderTable(_ rows: [Row]) -> String {
    let header = ["case", "rtsync median (min)", "baseline", "baseline median (min)", "ratio", "size / requests", "aim"]
    let body = rows.map { r in
        [r.name, statCell(r.rtsync, r.rtsyncNote), r.baselineName ?? "-", statCell(r.baseline, r.baselineNote),
         r.ratio.map { String(format: "%.2fx", $0) } ?? "-", r.extra ?? "", aimCell(r)]
    }
    var widths = header.map(\.count)
    for line in body { for (i, c) in line.enumerated() { widths[i] = max(widths[i], c.count) } }
    func fmt(_ cells: [String]) -> String {
        "| " + cells.enumerated().map { i, c in c + String(repeating: " ", count: widths[i] - c.count) }.joined(separator: " | ") + " |"
    }
    var out = [fmt(header), "|" + widths.map { String(repeating: "-", count: $0 + 2) }.joined(separator: "|") + "|"]
    out += body.map(fmt)
    return out.joined(separator: "\n")
}

// MARK: - Context

/// What every suite gets: run counts, scratch space, logging.
final class BenchContext: @unchecked Sendable {
    let quick: Bool
    let runs: Int
    let scratch: URL
    let repoRoot: URL

    init(quick: Bool, runs: Int?, scratch: URL, repoRoot: URL) {
        self.quick = quick
        self.runs = runs ?? (quick ? 3 : 5)
        self.scratch = scratch
        self.repoRoot = repoRoot
    }

    /// A fresh empty folder under the scratch space.
    func freshDir(_ name: String) throws -> URL {
        let url = scratch.appendingPathComponent(name, isDirectory: true)
        try? FileManager.default.removeItem(at: url)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    func log(_ text: String) {
        FileHandle.standardError.write(Data(("  · " + text + "\n").utf8))
    }
}

// MARK: - Processes

struct ProcessResult {
    var status: Int32
    var stdout: String
    var stderr: String
}

/// Runs a program and waits; output is collected through files (no pipe deadlocks on large output).
@discardableResult
func runProcess(_ executable: String, _ arguments: [String], environment: [String: String]? = nil, cwd: URL? = nil) throws -> ProcessResult {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
    p.arguments = arguments
    if let environment { p.environment = environment }
    if let cwd { p.currentDirectoryURL = cwd }
    let dir = FileManager.default.temporaryDirectory
    let outURL = dir.appendingPathComponent("rtsync-bench-\(UUID().uuidString).out")
    let errURL = dir.appendingPathComponent("rtsync-bench-\(UUID().uuidString).err")
    FileManager.default.createFile(atPath: outURL.path, contents: nil)
    FileManager.default.createFile(atPath: errURL.path, contents: nil)
    defer { try? FileManager.default.removeItem(at: outURL); try? FileManager.default.removeItem(at: errURL) }
    let out = try FileHandle(forWritingTo: outURL), err = try FileHandle(forWritingTo: errURL)
    p.standardOutput = out
    p.standardError = err
    try p.run()
    p.waitUntilExit()
    try? out.close(); try? err.close()
    return ProcessResult(status: p.terminationStatus,
                         stdout: (try? String(contentsOf: outURL, encoding: .utf8)) ?? "",
                         stderr: (try? String(contentsOf: errURL, encoding: .utf8)) ?? "")
}

/// Full path of a program on PATH, or nil.
func which(_ name: String) -> String? {
    for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
        let path = String(dir) + "/" + name
        if FileManager.default.isExecutableFile(atPath: path) { return path }
    }
    return nil
}

func fileSize(_ path: String) -> Int64 {
    ((try? FileManager.default.attributesOfItem(atPath: path)[.size]) as? NSNumber)?.int64Value ?? 0
}

/// Filesystem type of a folder: findmnt's name when it has one (stat -f calls ext4 "ext2/ext3"), with stat's beside it.
func filesystemType(_ url: URL) -> String {
    let stat = (try? runProcess("/usr/bin/stat", ["-f", "-c", "%T", url.path]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? "unknown"
    if let findmnt = which("findmnt"),
       let type = try? runProcess(findmnt, ["-no", "FSTYPE", "-T", url.path]).stdout.trimmingCharacters(in: .whitespacesAndNewlines),
       !type.isEmpty, type != stat {
        return "\(type) (stat -f: \(stat))"
    }
    return stat
}

/// CPU time (user + system, seconds) used so far by this process (`RUSAGE_SELF`) or by its waited-for children
/// (`RUSAGE_CHILDREN`: a tool run with `runProcess`, not the still-running moto_server).
func cpuSeconds(children: Bool = false) -> Double {
    var usage = rusage()
    _ = getrusage(children ? RUSAGE_CHILDREN.rawValue : RUSAGE_SELF.rawValue, &usage)
    func s(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
    return s(usage.ru_utime) + s(usage.ru_stime)
}
