@testable import BucketClient
import Foundation
import Testing

/// A local-folder bucket's temp files name their machine and process, so the leftover of a killed write on this
/// machine goes at the next clean-up, while a live process's file and another machine's wait for the age rule.
@Suite("Local bucket: leftovers of killed writes")
struct TemporaryOwnerTests {
    @Test func deadProcessesTempFile_isRemovedAtOnce_liveOnesAndOtherMachinesWait() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("tmpowner-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let store = try LocalFolderStore(root: root)
        let folder = root.appendingPathComponent("u/inbound")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        // A process that has ended: its pid no longer runs.
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", "exit 0"]
        try p.run()
        p.waitUntilExit()
        let host = String(TemporaryOwner.tag.split(separator: "~")[0])
        let dead = ".rtsync-tmp-\(host)~\(p.processIdentifier)-\(UUID().uuidString)"
        let live = ".rtsync-tmp-\(TemporaryOwner.tag)-\(UUID().uuidString)"
        let elsewhere = ".rtsync-tmp-otherhost~\(p.processIdentifier)-\(UUID().uuidString)"
        let oldStyle = ".rtsync-tmp-\(UUID().uuidString)"
        for name in [dead, live, elsewhere, oldStyle] { try Data("x".utf8).write(to: folder.appendingPathComponent(name)) }
        let removed = store.removeStaleTemporaryFiles(prefixes: ["u/inbound/"], olderThan: 3600).map { URL(fileURLWithPath: $0).lastPathComponent }
        #expect(removed == [dead])
        let left = Set(try FileManager.default.contentsOfDirectory(atPath: folder.path))
        #expect(left == [live, elsewhere, oldStyle])
    }

    @Test func tempFileNames_carryThisMachineAndProcess() {
        let url = LocalFiles.temporaryURL(beside: URL(fileURLWithPath: "/x/y/z.sqlite"))
        #expect(url.lastPathComponent.hasPrefix(".rtsync-tmp-\(TemporaryOwner.tag)-"))
        #expect(!TemporaryOwner.isOrphan(url.lastPathComponent, prefix: ".rtsync-tmp-"), "this process is alive")
    }
}
