import Foundation
import SyncEngine
import Testing

/// `rtsync init --new-site` (issue 18): a home copied with `cp` is refused by sync until it has its own site id.
@Suite("rtsync init --new-site", .enabled(if: RTSyncBinary.url != nil, "the rtsync binary is not built"))
struct NewSiteCLITests {
    @Test func copiedHome_syncRefusesWithHint_initNewSiteGivesItsOwnSite_thenBothSync() async throws {
        let dir = try TemporaryDirectory()
        let bucket = dir.file("bucket")
        let a = dir.file("a"), c = dir.file("c")
        let initA = try await ltRTSync(["init", "--home", a.path, "--bucket", bucket.path])
        try #require(initA.status == 0, "\(initA.stderr)")
        let syncA = try await ltRTSync(["sync", "--home", a.path])
        try #require(syncA.status == 0, "\(syncA.stderr)")
        try FileManager.default.copyItem(at: a, to: c)

        let refused = try await ltRTSync(["sync", "--home", c.path])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("error: database is a copy"), "\(refused.stderr)")
        #expect(refused.stderr.contains("hint: give this copy its own identity with `rtsync init --new-site`"), "\(refused.stderr)")

        let renewed = try await ltRTSync(["init", "--home", c.path, "--new-site", "--json"])
        #expect(renewed.status == 0, "\(renewed.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(renewed.stdout.utf8)) as? [String: String])
        let siteA = try SyncDatabase(path: RTSyncHome(root: a).database.path).siteID()
        #expect(json["oldSite"] == siteA)
        #expect(json["site"] != nil && json["site"] != siteA)

        let syncC = try await ltRTSync(["sync", "--home", c.path])
        #expect(syncC.status == 0, "\(syncC.stderr)")
        let again = try await ltRTSync(["sync", "--home", a.path])
        #expect(again.status == 0, "\(again.stderr)")
    }

    @Test func initNewSite_withUser_isAUsageError() async throws {
        let dir = try TemporaryDirectory()
        let r = try await ltRTSync(["init", "--home", dir.file("h").path, "--new-site", "--user", "x"])
        #expect(r.status != 0)
        #expect(r.stderr.contains("--new-site takes no --user"), "\(r.stderr)")
    }
}
