// swift-tools-version:6.1
// An app-like program using rtsync the way an app team would (issue 18): its own schema and folders, GRDB's
// DatabasePool as its database layer, two devices syncing through a local folder, a custom conflict resolver, a
// backup and a restore. It checks every step and exits 1 when one is wrong. CI builds and runs it
// (scripts/test.sh). Run: cd Examples && swift run tasks-app
import PackageDescription

let package = Package(
    name: "rtsync-examples",
    platforms: [.macOS(.v13), .iOS(.v16)],
    dependencies: [
        .package(name: "rtsync", path: ".."),
        .package(url: "https://github.com/groue/GRDB.swift", exact: "7.10.0"),
    ],
    targets: [
        .executableTarget(
            name: "tasks-app",
            dependencies: [
                .product(name: "SyncEngine", package: "rtsync"),
                .product(name: "BucketSync", package: "rtsync"),
                .product(name: "BucketClient", package: "rtsync"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            path: "Sources/TasksApp"
        ),
    ]
)
