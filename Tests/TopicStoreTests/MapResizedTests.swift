import Foundation
import LMDB
import Testing
import TopicStore

/// A process that opened a store maps it as large as the file was (when that is above
/// its initial map); a server writing beside it then grows the file past that map, and
/// LMDB answers the next transaction `MDB_MAP_RESIZED`. Every transaction of a store
/// adopts the grown map and goes on: nightly compaction beside a running server failed
/// at once when a store passed 256 MiB.
@Suite struct MapResizedTests: RunsTopicstore {
    static func commands(_ range: Range<Int>) -> String {
        range.map { i in
            #"{"project":"demo","type":"token","device_id":"D\#(i)","token":"tok\#(i)\#(String(repeating: "x", count: 100))","platform":"ios"}"#
            + "\n" + #"{"project":"demo","type":"register","device_id":"D\#(i)","topics":["all",{"code":"user.\#(i)","single":true}]}"#
        }.joined(separator: "\n")
    }

    @Test func readsAndCopiesAdoptAMapAnotherProcessGrew() throws {
        let dir = TemporaryDirectory("map-resized")
        let data = try loadedStore(dir, Self.commands(0..<200))
        var options = TopicStore.Options()
        options.readOnly = true
        options.initialMapSize = 64 << 10  // below the file: the map is the file's size
        let store = try TopicStore(directory: data, options: options)
        defer { store.close() }
        let mapped = store.environment.info().mapSize
        // Another process writes far past that map.
        let more = try topicstore(["load", "--data", data, "-"], stdin: Self.commands(200..<6000))
        #expect(more.status == 0, "\(more.stderr)")
        let grown = try FileManager.default.attributesOfItem(atPath: data + "/data.mdb")[.size] as? Int ?? 0
        #expect(grown > mapped, "the file (\(grown)) must outgrow the map (\(mapped)) for this test")

        // A copy (compaction's first step) from the grown store: complete, and a store.
        let copy = dir.sub("copy")
        try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
        try store.copyEnvironment(to: copy, compact: true)
        let stats = try topicstore(["stats", "--data", copy, "--json"])
        #expect(stats.status == 0, "\(stats.stderr)")
        #expect(stats.stdout.contains("\"lastSequence\":12000") || stats.stdout.contains("12000"), "\(stats.stdout)")
        // So does the packed copy compaction now makes (a review found its first
        // transactions outside the retry: MDB_MAP_RESIZED).
        let more2 = try topicstore(["load", "--data", data, "-"], stdin: Self.commands(6000..<9000))
        #expect(more2.status == 0, "\(more2.stderr)")
        let packed = dir.sub("packed")
        try FileManager.default.createDirectory(atPath: packed, withIntermediateDirectories: true)
        let report = try store.packedCopy(to: packed)
        #expect(report.entries > 0)
        let packedStats = try topicstore(["stats", "--data", packed, "--json"])
        #expect(packedStats.status == 0 && packedStats.stdout.contains("18000"), "\(packedStats.stdout) \(packedStats.stderr)")
        // And a read sees what the other process wrote.
        let applied = try store.read { txn in try store.tables.appliedSequence(txn) }
        #expect(applied == 18000)
        #expect(store.environment.info().mapSize >= grown)
    }
}
