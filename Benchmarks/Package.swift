// swift-tools-version:6.0
// The benchmark harness (issue 7). A separate package so `swift test` at the root never builds or runs it.
// Run: cd Benchmarks && swift run -c release rtsync-bench [SUITE...] [--quick] [--json FILE]
import PackageDescription

let package = Package(
    name: "rtsync-benchmarks",
    platforms: [.macOS(.v13)],
    dependencies: [
        .package(name: "rtsync", path: ".."),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        // Baseline-only access to the system libsqlite3 with the session extension visible (rtsync's own
        // SQLite target is not a product). Nothing in rtsync uses this.
        .systemLibrary(name: "CSQLiteBench", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite3"])]),
        .executableTarget(
            name: "rtsync-bench",
            dependencies: [
                "CSQLiteBench",
                .product(name: "DiffFormat", package: "rtsync"),
                .product(name: "SyncEngine", package: "rtsync"),
                .product(name: "BucketClient", package: "rtsync"),
                .product(name: "BucketSync", package: "rtsync"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
    ],
    swiftLanguageModes: [.v5]
)
