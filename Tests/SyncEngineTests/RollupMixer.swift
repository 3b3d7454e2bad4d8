import DiffFormat
import Foundation
import SyncEngine
import Testing

/// Roll-ups among a property test's deliveries (issue 19, aim 4): after an export a replica may write a roll-up of a
/// random part of its own diffs, and a replica receiving a batch may merge any roll-up first (which records the diffs
/// it covers as applied, unless it must wait for rows) and then get only some of those diffs, as a sync downloads none
/// of them.
final class RollupMixer {
    let box: Sandbox
    let label: String
    /// Each replica's own diffs so far, by name.
    private var own: [String: [String]] = [:]
    private var made: [(url: URL, covers: Set<String>)] = []

    init(box: Sandbox, label: String) {
        self.box = box
        self.label = label
    }

    /// `r` exported `diffID`; maybe writes a roll-up of a random part of its own diffs (calls `onMade` with its file).
    func exported(_ diffID: String, by r: Replica, rng: inout SeededGenerator, onMade: (URL, RollupResult) -> Void = { _, _ in }) throws {
        own[r.name, default: []].append(diffID)
        guard let mine = own[r.name], Bool.random(using: &rng) else { return }
        let some = mine.filter { _ in Bool.random(using: &rng) }
        guard !some.isEmpty else { return }
        let dir = box.path("rollups-\(r.name)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        guard let rollup = try r.db.writeRollup(covering: some, to: dir) else { Issue.record("\(label): no roll-up of \(some)"); return }
        #expect(Set(rollup.covers) == Set(some), "\(label)")
        let url = URL(fileURLWithPath: rollup.file)
        made.append((url, Set(rollup.covers)))
        onMade(url, rollup)
    }

    /// Merges some roll-ups into `r` (calls `onMerged` for each); returns `batch` without some of the diffs they covered.
    func mergeSome(into r: Replica, _ batch: [URL], rng: inout SeededGenerator, onMerged: (URL, ApplyReport) -> Void = { _, _ in }) -> [URL] {
        var covered: Set<String> = []
        for rollup in made.shuffled(using: &rng) where Bool.random(using: &rng) {
            let (report, recorded) = r.db.mergeRollup(rollup.url)
            onMerged(rollup.url, report)
            #expect(report.status != .rejected, "\(label): \(r.name) rejected roll-up \(rollup.url.lastPathComponent): \(report.reason ?? "")")
            #expect(recorded.isEmpty || Set(recorded) == rollup.covers, "\(label)")
            covered.formUnion(recorded)
        }
        return batch.filter { f in
            guard let id = DiffFile.diffID(fromFileName: f.lastPathComponent)?.string, covered.contains(id) else { return true }
            return Bool.random(using: &rng)
        }
    }
}
