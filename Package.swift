// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "topicstore",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "topicstore", targets: ["topicstore"]),
        .library(name: "TopicStore", targets: ["TopicStore"]),
    ],
    targets: [
        // C libraries from Debian (scripts/setup installs the -dev packages).
        .systemLibrary(name: "CLMDB", path: "Sources/CLMDB",
                       providers: [.apt(["liblmdb-dev"])]),
        .systemLibrary(name: "CRoaring", path: "Sources/CRoaring",
                       providers: [.apt(["libroaring-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", path: "Sources/CMicroHTTPD",
                       providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "CCrypto", path: "Sources/CCrypto",
                       providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite",
                       providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CZstd", path: "Sources/CZstd",
                       providers: [.apt(["libzstd-dev"])]),
        .systemLibrary(name: "CCurl", path: "Sources/CCurl",
                       providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CNGHTTP2", path: "Sources/CNGHTTP2",
                       providers: [.apt(["libnghttp2-dev", "libssl-dev"])]),

        // Our own C: CPU instructions Swift cannot express (a cache prefetch, SSE4.2 CRC-32C).
        .target(name: "CIntrinsics", path: "Sources/CIntrinsics"),
        // Our own C beside LMDB: its default key order, compared eight bytes at a time.
        .target(name: "CLMDBKeys", dependencies: ["CLMDB"], path: "Sources/CLMDBKeys"),
        // Our own C over CRoaring's containers: stored chunks counted and appended in place.
        .target(name: "CRoaringSlices", path: "Sources/CRoaringSlices",
                linkerSettings: [.linkedLibrary("roaring")]),

        // Thin typed wrappers.
        .target(name: "LMDB", dependencies: ["CLMDB", "CLMDBKeys"]),
        .target(name: "Roaring", dependencies: ["CRoaring", "CRoaringSlices"]),
        .target(name: "Digest", dependencies: ["CCrypto"]),

        // The domain, layer by layer; lower never imports higher.
        .target(name: "SubscriptionLog", dependencies: ["LMDB", "Digest", "CIntrinsics", "CZstd"]),
        .target(name: "Projections", dependencies: ["LMDB", "Roaring", "SubscriptionLog", "CIntrinsics"],
                // The fold's writer is a class whose caches every event touches: dynamic
                // exclusivity checks were 12% of a rebuild's instructions (callgrind).
                // Debug builds, which the tests run, keep the checks.
                swiftSettings: [.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release))]),
        .target(name: "TopicStore", dependencies: ["LMDB", "Roaring", "SubscriptionLog", "Projections"]),
        .target(name: "EventJSON", dependencies: ["SubscriptionLog"]),
        .target(name: "Replay", dependencies: ["LMDB", "Roaring", "SubscriptionLog", "Projections", "TopicStore", "EventJSON"]),
        // `topicstore compact`: snapshot at the horizon, zstd archive, garbage rules, new file generation.
        .target(name: "Compaction", dependencies: ["LMDB", "SubscriptionLog", "Projections", "TopicStore", "Replay", "EventJSON", "Notifications", "CZstd"]),
        // The HTTP edge: libmicrohttpd wrapper, projects and keys, MPush routes.
        .target(name: "HTTPServer", dependencies: ["CMicroHTTPD"]),
        .target(name: "AccessControl", dependencies: ["LMDB", "SubscriptionLog", "TopicStore", "CCrypto"]),
        // The send path: notifications queued in the store, rendered per platform, with durable progress.
        .target(name: "Notifications", dependencies: ["LMDB", "Roaring", "SubscriptionLog", "Projections", "TopicStore"]),
        // APNs and FCM over HTTP/2 (nghttp2 + OpenSSL; libcurl only for the OAuth2 token exchange),
        // JWT signing, provider credentials, the delivery worker.
        .target(name: "Delivery", dependencies: ["Notifications", "TopicStore", "Projections", "SubscriptionLog", "Roaring", "LMDB", "CCurl", "CCrypto", "CNGHTTP2"]),
        .target(name: "MPushAPI", dependencies: ["HTTPServer", "AccessControl", "TopicStore", "Projections", "SubscriptionLog", "EventJSON", "LMDB", "Notifications"]),
        // `topicstore bench`: workload generator, SQLite competitor, raw LMDB limit, report.
        .target(name: "Benchmarks", dependencies: ["LMDB", "SubscriptionLog", "Projections", "TopicStore", "Replay", "Compaction", "CSQLite"]),

        .executableTarget(name: "topicstore",
                          dependencies: ["TopicStore", "Replay", "SubscriptionLog", "Projections", "EventJSON", "LMDB", "Roaring", "Benchmarks", "HTTPServer", "AccessControl", "MPushAPI", "Compaction", "Notifications", "Delivery"],
                          // jemalloc (Debian's libjemalloc-dev) as the process's malloc: a replay
                          // decodes millions of short strings on one thread and frees them in bulk,
                          // where glibc's malloc spent a third of that thread in consolidation.
                          linkerSettings: [.linkedLibrary("jemalloc", .when(platforms: [.linux]))]),

        // Test helper: concurrent writers that print each durable acknowledgement (crash tests).
        .executableTarget(name: "topicstore-stress", dependencies: ["TopicStore", "SubscriptionLog"]),

        .testTarget(name: "TopicStoreTests",
                    dependencies: ["LMDB", "Roaring", "SubscriptionLog", "Projections", "TopicStore", "Replay", "EventJSON", "Benchmarks", "HTTPServer", "AccessControl", "MPushAPI", "Compaction", "Notifications", "Delivery"],
                    path: "Tests/TopicStoreTests"),
    ],
    swiftLanguageModes: [.v6]
)
