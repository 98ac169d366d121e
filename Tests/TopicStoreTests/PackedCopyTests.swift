import Foundation
import LMDB
import Testing

/// `PackedCopy`: every entry of every table, in order, with full pages.
@Suite struct PackedCopyTests {
    /// Tables filled in random key order, with deletions: what a store looks like after months.
    static func fragmentedEnvironment(_ path: String, seed: UInt64) throws -> (Environment, [String: [[UInt8]: [UInt8]]]) {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        var options = Environment.Options()
        options.mapSize = 64 << 20
        let env = try Environment(path: path, options: options)
        let names = ["devices", "log", "empty"]
        let dbs = try env.openDatabases(names, create: true)
        var expected: [String: [[UInt8]: [UInt8]]] = ["devices": [:], "log": [:], "empty": [:]]
        var random = SeededRandom(seed: seed)
        for round in 0..<20 {
            try env.write { txn in
                for _ in 0..<1_000 {
                    let key = withUnsafeBytes(of: UInt32(random.int(20_000)).bigEndian) { Array($0) }
                    let value = [UInt8](repeating: UInt8(truncatingIfNeeded: round), count: 40 + random.int(120))
                    try txn.put(dbs[0], key, value)
                    expected["devices"]![key] = value
                }
                for _ in 0..<300 {
                    let key = withUnsafeBytes(of: UInt32(random.int(20_000)).bigEndian) { Array($0) }
                    if try txn.delete(dbs[0], key) { expected["devices"]![key] = nil }
                }
            }
        }
        try env.write { txn in
            for seq in 1...5_000 as ClosedRange<UInt64> {
                let key = withUnsafeBytes(of: seq.bigEndian) { Array($0) }
                let value = [UInt8](repeating: 7, count: 100)
                try txn.put(dbs[1], key, value, flags: .append)
                expected["log"]![key] = value
            }
        }
        return (env, expected)
    }

    static func contents(_ path: String, _ names: [String]) throws -> (entries: [String: [[UInt8]: [UInt8]]], order: Bool, leafPages: [String: Int]) {
        var options = Environment.Options()
        options.readOnly = true
        let env = try Environment(path: path, options: options)
        let dbs = try env.openDatabases(names, create: false)
        var entries: [String: [[UInt8]: [UInt8]]] = [:]
        var leaves: [String: Int] = [:]
        var ordered = true
        try env.read { txn in
            for db in dbs {
                var table: [[UInt8]: [UInt8]] = [:]
                var previous: [UInt8]?
                try txn.withCursor(db) { cursor in
                    var entry = try cursor.first()
                    while let (k, v) = entry {
                        let key = Array(k)
                        if let previous, !previous.lexicographicallyPrecedes(key) { ordered = false }
                        previous = key
                        table[key] = Array(v)
                        entry = try cursor.next()
                    }
                }
                entries[db.name] = table
                leaves[db.name] = try txn.statistics(db).leafPages
            }
        }
        return (entries, ordered, leaves)
    }

    @Test func theCopyHoldsEveryEntryWithFullPages() throws {
        let dir = TemporaryDirectory("packed")
        let (source, expected) = try Self.fragmentedEnvironment(dir.sub("source"), seed: 3)
        try FileManager.default.createDirectory(atPath: dir.sub("copy"), withIntermediateDirectories: true)
        let report = try source.read { txn in try PackedCopy.write(txn, of: source, to: dir.sub("copy")) }
        let names = ["devices", "log", "empty"]
        let before = try source.read { txn in
            try names.map { try txn.statistics(try txn.openDatabaseIfPresent($0)!).leafPages }
        }
        let copy = try Self.contents(dir.sub("copy"), names)
        #expect(copy.entries == expected)
        #expect(copy.order)
        #expect(report.entries == expected.values.map(\.count).reduce(0, +) && report.skipped == 0)
        // Random-order writes leave the source's leaves part empty; the copy's are full:
        // no more leaves than the bytes need (a node's header and its slot in the page's
        // index take 10 bytes, the page's header 16), and a last one part full.
        let deviceBytes = expected["devices"]!.reduce(0) { $0 + $1.key.count + $1.value.count + 10 }
        #expect(copy.leafPages["devices"]! < before[0] * 3 / 4, "copy \(copy.leafPages), source \(before)")
        #expect(copy.leafPages["devices"]! <= deviceBytes / 4_000 + 1, "copy \(copy.leafPages), \(deviceBytes) bytes")
        #expect(copy.leafPages["log"]! <= before[1])
        var st = stat()
        #expect(stat(dir.sub("copy") + "/data.mdb", &st) == 0 && Int(st.st_size) == report.fileBytes)
        #expect(st.st_mode & 0o777 == 0o640)
    }

    @Test func startingAtLeavesTheEarlierKeysOut() throws {
        let dir = TemporaryDirectory("packed")
        let (source, expected) = try Self.fragmentedEnvironment(dir.sub("source"), seed: 4)
        try FileManager.default.createDirectory(atPath: dir.sub("copy"), withIntermediateDirectories: true)
        let from = withUnsafeBytes(of: UInt64(4_001).bigEndian) { Array($0) }
        let report = try source.read { txn in
            try PackedCopy.write(txn, of: source, to: dir.sub("copy"), startingAt: ["log": from])
        }
        let copy = try Self.contents(dir.sub("copy"), ["devices", "log", "empty"])
        #expect(copy.entries["devices"] == expected["devices"])
        #expect(copy.entries["log"] == expected["log"]!.filter { !$0.key.lexicographicallyPrecedes(from) })
        #expect(copy.entries["log"]!.count == 1_000 && report.skipped == 4_000)
    }

    /// A map proposed smaller than the copy is made as large as the file: nothing lost.
    @Test func aMapSmallerThanTheCopyIsMadeLargeEnough() throws {
        let dir = TemporaryDirectory("packed")
        let (source, expected) = try Self.fragmentedEnvironment(dir.sub("source"), seed: 5)
        try FileManager.default.createDirectory(atPath: dir.sub("copy"), withIntermediateDirectories: true)
        let report = try source.read { txn in
            try PackedCopy.write(txn, of: source, to: dir.sub("copy"), mapSize: 64 << 10)
        }
        let copy = try Self.contents(dir.sub("copy"), ["devices", "log", "empty"])
        #expect(copy.entries == expected)
        #expect(report.entries == expected.values.map(\.count).reduce(0, +))
        #expect(report.fileBytes > 64 << 10)
        let structure = try Environment(path: dir.sub("copy")).checkStructure()
        #expect(structure.isSound && structure.freePages == 0, "\(structure.issues.prefix(3))")
    }

    /// Merges every three entries into one under the third's key (the rest at the end):
    /// a rewriter that holds entries before it writes them.
    struct Threes: PackedCopy.EntryRewriter {
        var held: [([UInt8], [UInt8])] = []
        mutating func take(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer,
                           write: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws {
            held.append((Array(key), Array(value)))
            if held.count == 3 { try finish(write: write) }
        }
        mutating func finish(write: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws {
            guard let last = held.last else { return }
            let value = held.flatMap(\.1)
            try last.0.withUnsafeBytes { k in try value.withUnsafeBytes { v in try write(k, v) } }
            held = []
        }
    }

    /// A rewritten table holds what the rewriter wrote, its last held entries
    /// included, whatever map is proposed.
    @Test func aRewrittenTableHoldsWhatTheRewriterWrote() throws {
        let dir = TemporaryDirectory("packed")
        let (source, expected) = try Self.fragmentedEnvironment(dir.sub("source"), seed: 6)
        var threes: [[UInt8]: [UInt8]] = [:]
        let log = expected["log"]!.sorted { $0.key.lexicographicallyPrecedes($1.key) }
        for start in stride(from: 0, to: log.count, by: 3) {
            let group = log[start..<min(start + 3, log.count)]
            threes[group.last!.key] = group.flatMap(\.value)
        }
        for (name, mapSize) in [("small", 64 << 10), ("large", 64 << 20)] {
            try FileManager.default.createDirectory(atPath: dir.sub(name), withIntermediateDirectories: true)
            let report = try source.read { txn in
                try PackedCopy.write(txn, of: source, to: dir.sub(name), rewriting: ["log": { Threes() }], mapSize: mapSize)
            }
            let copy = try Self.contents(dir.sub(name), ["devices", "log", "empty"])
            #expect(copy.entries["log"] == threes, "\(name)")
            #expect(copy.entries["devices"] == expected["devices"], "\(name)")
            #expect(report.entries == expected["devices"]!.count + threes.count, "\(name)")
        }
    }
}
