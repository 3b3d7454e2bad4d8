import Foundation
import RTSyncTestSupport
import Testing

/// `rtsync conflicts` as people read it: rows by table and readable key, both values side by side, and a restore
/// on one device settling the same entry on the others when it syncs.
@Suite struct ConflictsCLITests {
    /// Two devices of one user that edited one title concurrently and synced both ways (each logs the conflict).
    func twoDevicesWithAConflict(_ dir: TemporaryDirectory) async throws -> (a: String, b: String) {
        let a = dir.file("a").path, b = dir.file("b").path, bucket = dir.file("bucket").path
        #expect(try await ltRTSync(["init", "--home", a, "--bucket", bucket]).status == 0)
        let user = try #require(try jsonObject(try await ltRTSync(["status", "--home", a, "--json"]).stdout)["userId"] as? String)
        #expect(try await ltRTSync(["sync", "--home", a]).status == 0)
        #expect(try await ltRTSync(["init", "--home", b, "--bucket", bucket, "--user", user]).status == 0)
        try sqliteShell(a + "/support/primary.sqlite", "UPDATE things SET title = 'title from a' WHERE rowid = (SELECT min(rowid) FROM things)")
        try sqliteShell(b + "/support/primary.sqlite", "UPDATE things SET title = 'title from b' WHERE rowid = (SELECT min(rowid) FROM things)")
        for home in [a, b, a] { #expect(try await ltRTSync(["sync", "--home", home]).status == 0) }
        return (a, b)
    }

    @Test func list_showsTableAndKeyColumns_andBothValuesSideBySide() async throws {
        let dir = try TemporaryDirectory()
        let (_, b) = try await twoDevicesWithAConflict(dir)
        let list = try await ltRTSync(["conflicts", "list", "--home", b])
        #expect(list.status == 0)
        let line = try #require(list.stdout.split(separator: "\n").first.map(String.init))
        #expect(line.hasPrefix("#1 things(account_id='") && line.contains("', id='"), "\(line)")
        #expect(line.contains("title: here 'title from b' | remote 'title from a' -> "), "\(line)")
        let show = try await ltRTSync(["conflicts", "show", "--home", b, "1"])
        #expect(show.stdout.contains("here:       'title from b'") && show.stdout.contains("remote:     'title from a'"), "\(show.stdout)")
        #expect(show.stdout.contains("(this device)"))
    }

    @Test func restoreOnOneDevice_settlesTheSameEntryOnTheOther_whenItSyncs() async throws {
        let dir = try TemporaryDirectory()
        let (a, b) = try await twoDevicesWithAConflict(dir)
        func open(_ home: String) async throws -> [[String: Any]] {
            let r = try await ltRTSync(["conflicts", "list", "--home", home, "--open", "--json"])
            return try #require(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [[String: Any]])
        }
        let onA = try await open(a), onB = try await open(b)
        try #require(onA.count == 1 && onB.count == 1, "each device logs the concurrent edit: \(onA) \(onB)")
        // Both lost the same value: restore it where it lost, and the other device's entry is settled by the sync.
        let loser = (onB[0]["winner"] as? String) == "local" ? b : a
        let other = loser == a ? b : a
        let entry = loser == a ? onA[0] : onB[0]
        let restored = try await ltRTSync(["conflicts", "restore", "--home", loser, String(try #require(entry["id"] as? Int))])
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(try await ltRTSync(["sync", "--home", loser]).status == 0)
        #expect(try await ltRTSync(["sync", "--home", other]).status == 0)
        #expect(try await open(other).isEmpty, "the other device's entry is still open")
        #expect(try await open(loser).isEmpty)
    }

}
