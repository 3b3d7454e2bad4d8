// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "rtsync",
    platforms: [.macOS(.v13), .iOS(.v16)],
    products: [
        .library(name: "DiffFormat", targets: ["DiffFormat"]),
        .library(name: "SyncEngine", targets: ["SyncEngine"]),
        .library(name: "BucketClient", targets: ["BucketClient"]),
        .library(name: "BucketSync", targets: ["BucketSync"]),
        .executable(name: "rtsync", targets: ["rtsync"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        // `swift package generate-documentation` for the DocC catalogs (a command plugin: nothing of it is linked).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // The system libsqlite3 (libsqlite3-dev on Debian/Ubuntu; part of the SDK on Apple platforms).
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite3"])]
        ),
        // The system zlib (zlib1g-dev on Debian/Ubuntu; part of the SDK on Apple platforms): diffs compressed in transit.
        .systemLibrary(name: "CZlib", providers: [.apt(["zlib1g-dev"]), .brew(["zlib"])]),
        // The one place that calls the sqlite3_* C API: connection, statement, backup.
        .target(name: "RTSQLite", dependencies: ["CSQLite"]),
        // Copy-on-write file clone (FICLONE ioctl / clonefile), which Swift cannot call directly.
        .target(name: "CClone"),
        // The bundled demo database: its own folder holding only the Swift file and the one resource, so a stray
        // -wal/-shm or a new fixture never becomes an "unhandled file" warning in apps that depend on the package.
        // Fixtures/databases/build.sh writes the file here too; DemoAssetTests checks the two are the same bytes.
        .target(
            name: "DemoAsset",
            path: "Sources/DemoAsset",
            resources: [.copy("record-thing-demo.sqlite")]
        ),
        .target(
            name: "DiffFormat",
            dependencies: ["RTSQLite", "CZlib", .product(name: "Crypto", package: "swift-crypto")]
        ),
        .target(
            name: "SyncEngine",
            dependencies: ["DiffFormat", "RTSQLite", "CClone", "DemoAsset", .product(name: "Crypto", package: "swift-crypto")]
        ),
        // Blocking HTTP over libcurl loaded at run time, for large S3 request bodies on Linux (see CurlTransport).
        .target(name: "CCurlShim", linkerSettings: [.linkedLibrary("dl", .when(platforms: [.linux]))]),
        // CRC-32 for S3 part checksums: the system zlib's, loaded at run time, or a portable table loop.
        .target(name: "CChecksum", linkerSettings: [.linkedLibrary("dl", .when(platforms: [.linux]))]),
        .target(
            name: "BucketClient",
            dependencies: [.product(name: "Crypto", package: "swift-crypto"), "CChecksum",
                           // scrypt, the passphrase KDF that wraps exported content keys (client-side encryption).
                           .product(name: "_CryptoExtras", package: "swift-crypto"),
                           .target(name: "CCurlShim", condition: .when(platforms: [.linux]))]
        ),
        // Adapts BucketClient's stores to SyncEngine's RemoteStore (keeps SyncEngine free of any backend).
        .target(name: "BucketSync", dependencies: ["BucketClient", "SyncEngine", "DiffFormat", .product(name: "Crypto", package: "swift-crypto")]),
        .executableTarget(
            name: "rtsync",
            dependencies: [
                "DiffFormat", "SyncEngine", "BucketClient", "BucketSync", "RTSQLite",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // Process and loopback-port helpers shared by the test targets (not a product).
        .target(name: "RTSyncTestSupport", path: "Tests/Support"),
        .testTarget(name: "DiffFormatTests", dependencies: ["DiffFormat", "RTSQLite"]),
        .testTarget(name: "SyncEngineTests", dependencies: ["SyncEngine", "DiffFormat", "RTSQLite"]),
        .testTarget(name: "BucketClientTests", dependencies: ["BucketClient", "CChecksum", "RTSyncTestSupport"]),
        .testTarget(name: "IntegrationTests", dependencies: ["DiffFormat", "RTSQLite", "SyncEngine", "DemoAsset", "BucketClient", "BucketSync", "RTSyncTestSupport",
                                                           .product(name: "Crypto", package: "swift-crypto")]),
    ]
)
