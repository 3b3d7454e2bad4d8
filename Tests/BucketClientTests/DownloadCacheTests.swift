import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Testing
@testable import BucketClient

@Suite struct DownloadCacheTests {
    @Test func secondFetch_revalidatesWithETag_andServesCachedFile() async throws {
        let server = try await HostileServer.shared.value
        let cache = try DownloadCache(folder: makeTemporaryFolder(), maxBytes: 1 << 20)
        let url = server.endpoint.appendingPathComponent("files/abc.jpg")
        let first = try await cache.fetch(url)
        #expect(first.status == .downloaded)
        #expect(first.size == 4000)
        let second = try await cache.fetch(url)
        #expect(second.status == .revalidated)
        #expect(second.fileURL == first.fileURL)
        #expect(try Data(contentsOf: second.fileURL).count == 4000)
        #expect(cache.requestCounter.count("GET") == 2)
    }

    @Test func pastTheSizeCap_leastRecentlyUsedIsEvicted() async throws {
        let server = try await HostileServer.shared.value
        let cache = try DownloadCache(folder: makeTemporaryFolder(), maxBytes: 10_000)
        let a = server.endpoint.appendingPathComponent("files/a.jpg")
        let b = server.endpoint.appendingPathComponent("files/b.jpg")
        let c = server.endpoint.appendingPathComponent("files/c.jpg")
        _ = try await cache.fetch(a)
        _ = try await cache.fetch(b)
        _ = try await cache.fetch(a)  // a is now more recent than b
        _ = try await cache.fetch(c)
        #expect(await cache.cachedFile(for: b) == nil)
        #expect(await cache.cachedFile(for: a) != nil)
        #expect(await cache.cachedFile(for: c) != nil)
        #expect(await cache.totalBytes <= 10_000)
    }

    @Test func fileURL_isCopied_thenRevalidatedUntilItChanges() async throws {
        let folder = try makeTemporaryFolder()
        let source = folder.appendingPathComponent("demo.m4a")
        try Data("one".utf8).write(to: source)
        let cache = try DownloadCache(folder: folder.appendingPathComponent("cache"), maxBytes: 1 << 20)
        #expect(try await cache.fetch(source).status == .downloaded)
        #expect(try await cache.fetch(source).status == .revalidated)
        try await Task.sleep(nanoseconds: 10_000_000)
        try Data("two!".utf8).write(to: source)
        let changed = try await cache.fetch(source)
        #expect(changed.status == .downloaded)
        #expect(try Data(contentsOf: changed.fileURL) == Data("two!".utf8))
    }

    @Test func serverDown_servesCachedCopyAsOffline() async throws {
        let (server, process) = try await HostileServer.startWithProcess()
        let cache = try DownloadCache(folder: makeTemporaryFolder(), maxBytes: 1 << 20,
                                      retry: RetryPolicy(maxAttempts: 2, baseDelay: 0.01, maxDelay: 0.02))
        let url = server.endpoint.appendingPathComponent("files/offline.jpg")
        let first = try await cache.fetch(url)
        #expect(first.status == .downloaded)
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        let second = try await cache.fetch(url)
        #expect(second.status == .offline)
        #expect(try Data(contentsOf: second.fileURL).count == 4000)
    }

    @Test func missingResource_throwsNotFound() async throws {
        let server = try await HostileServer.shared.value
        let cache = try DownloadCache(folder: makeTemporaryFolder(), maxBytes: 1 << 20)
        await #expect(throws: BucketError.self) { try await cache.fetch(server.endpoint.appendingPathComponent("nothing-here")) }
    }
}
