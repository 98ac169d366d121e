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

        // Thin typed wrappers.
        .target(name: "LMDB", dependencies: ["CLMDB"]),
        .target(name: "Roaring", dependencies: ["CRoaring"]),

        // The domain, layer by layer; lower never imports higher.
        .target(name: "SubscriptionLog", dependencies: ["LMDB"]),
        .target(name: "Projections", dependencies: ["LMDB", "Roaring", "SubscriptionLog"]),
        .target(name: "TopicStore", dependencies: ["LMDB", "Roaring", "SubscriptionLog", "Projections"]),
        .target(name: "EventJSON", dependencies: ["SubscriptionLog"]),
        .target(name: "Replay", dependencies: ["LMDB", "SubscriptionLog", "Projections", "TopicStore"]),

        .executableTarget(name: "topicstore",
                          dependencies: ["TopicStore", "Replay", "SubscriptionLog", "Projections", "EventJSON", "LMDB", "Roaring"]),

        .testTarget(name: "TopicStoreTests",
                    dependencies: ["LMDB", "Roaring", "SubscriptionLog", "Projections", "TopicStore", "Replay", "EventJSON"],
                    path: "Tests/TopicStoreTests"),
    ],
    swiftLanguageModes: [.v6]
)
