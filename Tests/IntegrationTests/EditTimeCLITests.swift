import Foundation
import RTSyncTestSupport
import RTSQLite
import Testing

/// Edit-time clocks through real parts: edits made with the `sqlite3` shell (another process, SQLite's default
/// settings), wall clocks shifted with `faketime`, diffs made and applied by the `rtsync` binary.
@Suite("edit-time clocks through the CLI and the sqlite3 shell",
       .enabled(if: findExecutable("sqlite3") != nil, "needs the sqlite3 shell (scripts/test.sh installs it)"))
struct EditTimeCLITests {
    struct Device {
        let db: URL
        let outbox: URL
    }

    static func devices(_ dir: TemporaryDirectory) throws -> (Device, Device) {
        let source = try LTFixture.demoCopy(in: dir)
        func make(_ name: String) throws -> Device {
            let db = dir.file("\(name).sqlite")
            try FileManager.default.copyItem(at: source, to: db)
            let tracked = try RTSyncBinary.run(["track", "--db", db.path, "--all"])
            #expect(tracked.status == 0, "\(tracked.stderr)")
            return Device(db: db, outbox: dir.file("\(name)-outbox"))
        }
        return (try make("c1"), try make("c2"))
    }

    /// Runs SQL with the sqlite3 shell, its wall clock shifted by `shift` (a faketime offset such as "-1h").
    static func shell(_ device: Device, _ sql: String, shift: String? = nil) throws {
        let sqlite3 = try #require(findExecutable("sqlite3"))
        if let shift {
            let faketime = try #require(findExecutable("faketime"), "faketime is needed for a shifted clock (scripts/test.sh installs it)")
            let r = try runUnderFaketime(URL(fileURLWithPath: faketime), offset: shift, [sqlite3, device.db.path, sql])
            try #require(r.status == 0, "sqlite3 under faketime failed (\(r.status)): \(r.stderr)")
        } else {
            _ = try runProcess(sqlite3, [device.db.path, sql])
        }
    }

    static func export(_ device: Device) throws -> URL {
        let out = try RTSyncBinary.run(["diff", "create", "--db", device.db.path, "--out", device.outbox.path, "--json"])
        #expect(out.status == 0, "\(out.stderr)")
        let file = try #require(try jsonObject(out.stdout)["file"] as? String, "\(out.stdout)")
        return URL(fileURLWithPath: file)
    }

    static func apply(_ file: URL, to device: Device) throws {
        let out = try RTSyncBinary.run(["diff", "apply", "--db", device.db.path, file.path])
        #expect(out.status == 0, "\(out.stdout)\(out.stderr)")
    }

    static func color(_ device: Device) throws -> SQLValue? {
        try Connection(path: device.db.path, mode: .readOnly).scalar("SELECT color FROM things WHERE title = 'Armchair'")
    }

    /// c2 edits, then c1 edits the same column; c1 exports first, c2 later: c1's later edit wins on both.
    @Test func laterShellEdit_winsOnBoth_whenTheEarlierOneIsExportedLast() throws {
        let dir = try TemporaryDirectory()
        let (c1, c2) = try Self.devices(dir)
        try Self.shell(c2, "UPDATE things SET color = 'older, c2' WHERE title = 'Armchair'")
        Thread.sleep(forTimeInterval: 0.05)
        try Self.shell(c1, "UPDATE things SET color = 'newer, c1' WHERE title = 'Armchair'")
        let f1 = try Self.export(c1)
        Thread.sleep(forTimeInterval: 0.05)
        let f2 = try Self.export(c2)
        try Self.apply(f2, to: c1)
        try Self.apply(f1, to: c2)
        #expect(try Self.color(c1) == .text("newer, c1"))
        #expect(try Self.color(c2) == .text("newer, c1"))
        let log = try RTSyncBinary.run(["conflicts", "list", "--db", c2.db.path, "--json"])
        #expect(log.stdout.contains("older, c2"), "the losing edit is in c2's conflict log: \(log.stdout)")
    }

    /// An edit made with the shell on a device whose clock is an hour behind, right after it applied a remote
    /// edit, still wins over that edit on both devices.
    @Test(.enabled(if: findExecutable("faketime") != nil, "needs faketime (scripts/test.sh installs it)"))
    func editAfterApplying_onADeviceAnHourBehind_winsOnBoth() throws {
        let dir = try TemporaryDirectory()
        let (c1, c2) = try Self.devices(dir)
        try Self.shell(c1, "UPDATE things SET color = 'first, c1' WHERE title = 'Armchair'")
        try Self.apply(try Self.export(c1), to: c2)
        try Self.shell(c2, "UPDATE things SET color = 'after seeing c1, c2' WHERE title = 'Armchair'", shift: "-1h")
        let f2 = try Self.export(c2)
        try Self.apply(f2, to: c1)
        #expect(try Self.color(c1) == .text("after seeing c1, c2"))
        #expect(try Self.color(c2) == .text("after seeing c1, c2"))
    }
}
