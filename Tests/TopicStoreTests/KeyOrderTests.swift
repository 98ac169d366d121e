import Foundation
import LMDB
import Testing

/// Every table takes its keys in `topicstore_key_order` (CLMDBKeys), which
/// must be exactly LMDB's default order: bytes compared as unsigned, a key
/// first when it is a prefix of the other. A store written by topicstore is
/// then the store any other LMDB program (mdb_dump, an older topicstore)
/// reads, with its B-trees in the order they search.
@Suite struct KeyOrderTests {
    /// Keys of every length up to 20 (the 8-, 2- and 1-byte steps of the
    /// comparison and their mixes), crowded with shared prefixes and with the
    /// bytes where a signed or little-endian comparison would go wrong,
    /// put in random order: a cursor walks them in byte order, and a seek
    /// to a probe finds the first key at or after it.
    @Test func keysAreInByteOrderWhateverTheirLengths() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keyorder-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = Environment.Options()
        options.mapSize = 64 << 20
        let env = try Environment(path: directory, options: options)
        let db = try env.openDatabases(["keys"], create: true)[0]
        var random = SeededRandom(seed: 0x0DE2_0F_B17E)
        let bytes: [UInt8] = [0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]
        func key() -> [UInt8] { (0..<(1 + random.int(20))).map { _ in random.pick(bytes) } }
        var model = Set<[UInt8]>()
        try env.write { txn in
            for _ in 0..<6_000 {
                var k = key()
                // A key that extends one already there, or differs from it in one byte.
                if let other = model.randomElement(using: &random), random.int(2) == 0 {
                    k = random.int(2) == 0 ? other + k.prefix(random.int(4)) : other
                    if k == other { k[random.int(k.count)] = random.pick(bytes) }
                }
                try txn.put(db, k, [1])
                model.insert(k)
            }
        }
        let sorted = model.sorted { $0.lexicographicallyPrecedes($1) }
        var walked: [[UInt8]] = []
        var probes: [(probe: [UInt8], found: [UInt8]?)] = []
        try env.read { txn in
            try txn.withCursor(db) { cursor in
                var entry = try cursor.first()
                while let (k, _) = entry {
                    walked.append(Array(k))
                    entry = try cursor.next()
                }
                for _ in 0..<2_000 {
                    let probe = key()
                    probes.append((probe, try cursor.seek(atLeast: probe).map { Array($0.key) }))
                }
            }
        }
        #expect(walked.count == sorted.count)
        #expect(walked == sorted, "the cursor's order is not the byte order")
        for (probe, found) in probes {
            let expected = sorted.first { !$0.lexicographicallyPrecedes(probe) }
            #expect(found == expected, "seek to \(probe)")
        }
    }
}
