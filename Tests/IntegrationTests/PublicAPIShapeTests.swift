import BucketClient
import BucketSync
import DiffFormat
import Foundation
import SyncEngine
import Testing

/// The public API as an app uses it, with every library product imported at once (issue 18): names that would be
/// ambiguous across products fail to compile here, and values meant to cross tasks are `Sendable`.
@Suite struct PublicAPIShapeTests {
    /// Compiles only while `T` is `Sendable`.
    static func requireSendable<T: Sendable>(_: T.Type) {}

    @Test func retryPolicies_ofBothProducts_areNamedWithoutModuleQualifiers() {
        // HTTP-level retries of one request (BucketClient) and retries of whole remote steps (SyncEngine).
        var configuration = S3Configuration(bucket: "b", region: "us-east-1")
        configuration.retry = RetryPolicy(maxAttempts: 2)
        let steps = RemoteRetryPolicy(maxAttempts: 3)
        #expect(configuration.retry.maxAttempts == 2)
        #expect(steps.maxAttempts == 3)
    }

    @Test func diffReader_isReadFromAnotherTask() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("PublicAPIShape-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let table = TableDefinition(name: "notes", columns: [ColumnDefinition(name: "id", type: "TEXT", primaryKey: 1),
                                                             ColumnDefinition(name: "body", type: "TEXT")])
        let writer = try DiffWriter(directory: folder, kind: .changes, authorUser: "u", authorSite: "s")
        try writer.addTable(table)
        let clock = Clock(hlc: HLC(rawValue: 1 << 20), site: "s")
        try writer.append(RowChange(table: "notes", operation: .upsert, values: [.text("a"), .text("hello")], clock: clock, born: clock))
        let file = try writer.finish()

        Self.requireSendable(DiffReader.self)
        Self.requireSendable(DiffMetadata.self)
        Self.requireSendable(SyncLocation.self)
        Self.requireSendable(SyncProgress.self)
        let reader = try DiffReader(url: file)
        // Two tasks read the same reader at once: reads take turns on its connection, both see the row.
        async let first = Task.detached { try reader.changes().count }.value
        async let second = Task.detached { try reader.changes().count }.value
        #expect(try await first == 1)
        #expect(try await second == 1)
    }
}
