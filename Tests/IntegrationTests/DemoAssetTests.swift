import BucketSync
import DemoAsset
import Foundation
import RTSQLite
import SyncEngine
import Testing

/// The DemoAsset target ships the demo fixture and nothing else; `InitChain` takes an app's own asset (issue 18).
@Suite struct DemoAssetTests {
    @Test func bundledAsset_isByteForByteTheDemoFixture() throws {
        let bundled = try #require(DemoAsset.url, "the DemoAsset resource bundle is missing")
        #expect(try Data(contentsOf: bundled) == Data(contentsOf: LTFixture.demoDatabase),
                "Sources/DemoAsset/record-thing-demo.sqlite differs from Fixtures/databases: run Fixtures/databases/build.sh")
    }

    @Test func demoAssetFolder_holdsOnlyTheSwiftFileAndTheAsset() throws {
        let folder = RTSyncBinary.packageRoot.appendingPathComponent("Sources/DemoAsset")
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(names == ["DemoAsset.swift", DemoAsset.fileName], "\(names)")
    }

    @Test func initChain_withTheAppsOwnAssetAndNoDemoSource_installsTheAppsAsset() async throws {
        let dir = try TemporaryDirectory()
        let asset = dir.file("starter.sqlite")
        try Connection(path: asset.path).execute("CREATE TABLE starter_item(id TEXT PRIMARY KEY, title TEXT NOT NULL); INSERT INTO starter_item VALUES ('welcome', 'Welcome')")
        let location = SyncLocation(database: dir.file("app/tasks.sqlite"), folder: dir.file("app/sync"))
        let bucket = try ObjectStoreRemote.open(dir.file("bucket").path)
        let result = try await InitChain(home: location, remote: bucket, bundledAsset: asset, demoPrefix: nil).run()
        #expect(result.source == .bundled)
        #expect(result.attempts.contains { $0.source == .demo && $0.detail == "no demo source named" })
        #expect(try ltScalar(location.database, "SELECT title FROM starter_item WHERE id = 'welcome'") == .text("Welcome"))
        #expect(try SyncDatabase(path: location.database.path).userID() == result.userId)
    }
}
