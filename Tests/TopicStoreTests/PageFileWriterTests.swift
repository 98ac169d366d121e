import Foundation
import LMDB
import Testing

/// `PageFileWriter`: a data file laid out without LMDB, which LMDB reads, writes
/// on, and lays out as its own `MDB_APPEND` puts do.
@Suite struct PageFileWriterTests {
    typealias Table = (name: String, entries: [([UInt8], [UInt8])])

    /// Tables of every shape: deep (long keys), with values on overflow pages,
    /// numbered keys, one entry, none.
    static func tables(seed: UInt64) -> [Table] {
        var random = SeededRandom(seed: seed)
        var long = Set<[UInt8]>()
        while long.count < 12_000 {
            long.insert((0..<(150 + random.int(60))).map { _ in UInt8(truncatingIfNeeded: random.int(4) + 97) })
        }
        let deep = long.sorted { $0.lexicographicallyPrecedes($1) }.enumerated().map { i, key -> ([UInt8], [UInt8]) in
            let size = i % 400 == 7 ? 2_000 + random.int(14_000) : random.int(300)
            return (key, (0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        }
        let numbered = (1...40_000 as ClosedRange<UInt64>).map { n -> ([UInt8], [UInt8]) in
            (withUnsafeBytes(of: (n * 3).bigEndian, Array.init), [UInt8](repeating: UInt8(truncatingIfNeeded: n), count: 10 + Int(n % 7)))
        }
        // Values at the edge of a node: a key and value of LMDB's largest node, and one byte more.
        let edge = [([UInt8]("a".utf8), [UInt8](repeating: 1, count: 2_038 - 8 - 1)),
                    ([UInt8]("b".utf8), [UInt8](repeating: 2, count: 2_038 - 8)),
                    ([UInt8]("c".utf8), []),
                    ([UInt8]("d".utf8), [UInt8](repeating: 4, count: 4_096 - 16))]
        return [("deep", deep), ("empty", []), ("numbered", numbered), ("edge", edge), ("one", [([7], [8])])]
    }

    static func writeWithWriter(_ tables: [Table], into directory: String,
                                bypassingPageCache: Bool = false) throws -> PageFileWriter.Report {
        let writer = try PageFileWriter(path: directory + "/data.mdb", bypassingPageCache: bypassingPageCache)
        for table in tables {
            writer.beginTable(table.name)
            for (k, v) in table.entries {
                try k.withUnsafeBytes { kb in try v.withUnsafeBytes { vb in try writer.append(kb, vb) } }
            }
            try writer.endTable()
        }
        return try writer.finish(mapSize: 64 << 20)
    }

    static func writeWithLMDB(_ tables: [Table], into directory: String) throws {
        var options = Environment.Options()
        options.mapSize = 256 << 20
        let env = try Environment(path: directory, options: options)
        let dbs = try env.openDatabases(tables.map(\.name), create: true)
        try env.write { txn in
            for (db, table) in zip(dbs, tables) {
                for (k, v) in table.entries { try txn.put(db, k, v, flags: .append) }
            }
        }
    }

    static func open(_ directory: String, _ names: [String]) throws -> (Environment, [Database]) {
        var options = Environment.Options()
        options.mapSize = 256 << 20
        let env = try Environment(path: directory, options: options)
        return (env, try env.openDatabases(names, create: false))
    }

    static func contents(_ env: Environment, _ db: Database) throws -> [([UInt8], [UInt8])] {
        try env.read { txn in
            var all: [([UInt8], [UInt8])] = []
            try txn.withCursor(db) { cursor in
                var entry = try cursor.first()
                while let (k, v) = entry {
                    all.append((Array(k), Array(v)))
                    entry = try cursor.next()
                }
            }
            return all
        }
    }

    @Test func lmdbReadsEveryEntryAndFindsEachKey() throws {
        let dir = TemporaryDirectory("pagefile")
        let tables = Self.tables(seed: 11)
        let report = try Self.writeWithWriter(tables, into: dir.path)
        #expect(report.entries == tables.reduce(0) { $0 + $1.entries.count } + tables.count)
        let (env, dbs) = try Self.open(dir.path, tables.map(\.name))
        for (db, table) in zip(dbs, tables) {
            let read = try Self.contents(env, db)
            #expect(read.count == table.entries.count, "\(table.name)")
            let same = read.elementsEqual(table.entries) { $0.0 == $1.0 && $0.1 == $1.1 }
            #expect(same, "\(table.name)")
            // Point lookups go through the branch keys.
            try env.read { txn in
                for (k, v) in table.entries.enumerated().filter({ $0.offset % 97 == 0 }).map(\.element) {
                    let found = try txn.get(db, k).map { Array($0) }
                    #expect(found == v, "\(table.name)")
                }
                let absent = try txn.get(db, [0xff, 0xff, 0xff]) == nil
                #expect(absent)
            }
        }
        let structure = try env.checkStructure()
        #expect(structure.isSound, "\(structure.issues.prefix(5))")
        #expect(structure.freePages == 0)
        #expect(structure.transactionID == 1)
    }

    /// Written past the page cache (`O_DIRECT`, where the filesystem allows it:
    /// the test directory's, and a tmpfs), the file is the same, byte for byte,
    /// as one written through it, a value larger than the writer's buffers included
    /// (written at once, not through them).
    @Test func aFileWrittenPastThePageCacheIsTheSame() throws {
        let dir = TemporaryDirectory("pagefile")
        var tables = Self.tables(seed: 15)
        tables.append(("huge", [([1], (0..<(5 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 >> 3) }), ([2], [2])]))
        let tmpfs = try? SmallFilesystem(megabytes: 64)  // (mounting needs root, as the full-disk tests)
        for base in [dir.path] + (tmpfs.map { [$0.path] } ?? []) {
            var files: [Data] = []
            for direct in [false, true] {
                let path = base + "/\(direct)"
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
                let report = try Self.writeWithWriter(tables, into: path, bypassingPageCache: direct)
                files.append(try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb")))
                #expect(files.last!.count == report.fileBytes)
            }
            #expect(files[0] == files[1], "\(base)")
        }
        let (env, dbs) = try Self.open(dir.path + "/true", tables.map(\.name))
        let huge = try Self.contents(env, dbs.last!)
        #expect(huge.elementsEqual(tables.last!.entries) { $0.0 == $1.0 && $0.1 == $1.1 })
        let structure = try env.checkStructure()
        #expect(structure.isSound, "\(structure.issues.prefix(5))")
    }

    /// A key LMDB would refuse (empty, or past 511 bytes) is refused as `mdb_put` refuses it.
    @Test func aKeyLMDBWouldRefuseIsRefused() throws {
        let dir = TemporaryDirectory("pagefile")
        let writer = try PageFileWriter(path: dir.sub("data.mdb"))
        writer.beginTable("t")
        for size in [0, 512] {
            let key = [UInt8](repeating: 1, count: size)
            #expect(throws: LMDBError.badValueSize) {
                try key.withUnsafeBytes { k in try [UInt8]([1]).withUnsafeBytes { try writer.append(k, $0) } }
            }
        }
        try [UInt8](repeating: 1, count: 511).withUnsafeBytes { k in try [UInt8]([1]).withUnsafeBytes { try writer.append(k, $0) } }
    }

    /// Every branch page names at least two children: LMDB asserts it when a
    /// lookup goes through one (`mdb_page_search_root`, "NUMKEYS(mp) > 1") and
    /// stops the process. 227 branch nodes of 8-byte keys fill a page, a leaf
    /// holds two entries of 2,000 bytes: from 455 entries on, the 228th leaf
    /// would have been named alone on a second branch page (as compaction's
    /// packed copy did in a test, an abort inside LMDB).
    @Test func everyBranchPageNamesTwoChildren() throws {
        let dir = TemporaryDirectory("pagefile")
        let value = [UInt8](repeating: 5, count: 2_000)
        for count in 440..<480 {
            let path = dir.sub("\(count)")
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            let writer = try PageFileWriter(path: path + "/data.mdb")
            writer.beginTable("t")
            for i in 0..<UInt64(count) {
                try withUnsafeBytes(of: i.bigEndian) { k in try value.withUnsafeBytes { try writer.append(k, $0) } }
            }
            try writer.endTable()
            try writer.finish(sync: false)
            let (env, dbs) = try Self.open(path, ["t"])
            let structure = try env.checkStructure()
            #expect(structure.isSound, "\(count) entries: \(structure.issues.prefix(3))")
            guard structure.isSound else { continue }  // a lookup would abort the process
            try env.read { txn in
                for i in 0..<UInt64(count) {
                    let found = try withUnsafeBytes(of: i.bigEndian) { try txn.get(dbs[0], $0) }?.count
                    #expect(found == 2_000, "\(count) entries, key \(i)")
                }
            }
        }
    }

    /// The same appends through LMDB give the same tree: depth, leaves, overflow pages, entries.
    @Test func theTreesAreThoseOfLMDBsOwnAppends() throws {
        let dir = TemporaryDirectory("pagefile")
        let tables = Self.tables(seed: 12)
        try FileManager.default.createDirectory(atPath: dir.sub("ours"), withIntermediateDirectories: true)
        _ = try Self.writeWithWriter(tables, into: dir.sub("ours"))
        try FileManager.default.createDirectory(atPath: dir.sub("lmdb"), withIntermediateDirectories: true)
        try Self.writeWithLMDB(tables, into: dir.sub("lmdb"))
        let ours = try Self.open(dir.sub("ours"), tables.map(\.name)), theirs = try Self.open(dir.sub("lmdb"), tables.map(\.name))
        for (a, b) in zip(ours.1, theirs.1) {
            let x = try ours.0.read { try $0.statistics(a) }, y = try theirs.0.read { try $0.statistics(b) }
            let ourShape = [x.depth, x.entries, x.leafPages, x.overflowPages]
            let theirShape = [y.depth, y.entries, y.leafPages, y.overflowPages]
            #expect(ourShape == theirShape, "\(a.name): depth, entries, leaf and overflow pages")
            // LMDB's appends leave branch pages a little less full (52 against 54 for the deep table).
            #expect(x.branchPages <= y.branchPages && x.branchPages * 10 >= y.branchPages * 9, "\(a.name): \(x.branchPages) / \(y.branchPages) branch pages")
        }
        let deep = ours.1.first { $0.name == "deep" }!
        let depth = try ours.0.read { try $0.statistics(deep).depth }
        #expect(depth >= 3)
    }

    /// Writes on the file as LMDB's own: deletes and inserts everywhere (splits,
    /// merges, freed pages reused), through several commits and a reopen.
    @Test func lmdbWritesOnTheFile() throws {
        let dir = TemporaryDirectory("pagefile")
        let tables = Self.tables(seed: 13)
        _ = try Self.writeWithWriter(tables, into: dir.path)
        var model: [String: [[UInt8]: [UInt8]]] = [:]
        for table in tables { model[table.name] = Dictionary(uniqueKeysWithValues: table.entries.map { ($0.0, $0.1) }) }
        var random = SeededRandom(seed: 14)
        do {
            let (env, dbs) = try Self.open(dir.path, tables.map(\.name))
            for _ in 0..<4 {
                try env.write { txn in
                    for db in dbs {
                        let keys = Array(model[db.name]!.keys)
                        for key in keys where random.int(3) == 0 {
                            let deleted = try txn.delete(db, key)
                            #expect(deleted)
                            model[db.name]![key] = nil
                        }
                        for _ in 0..<(1 + keys.count / 5) {
                            let key = (0..<(1 + random.int(40))).map { _ in UInt8(truncatingIfNeeded: random.int(6) + 96) }
                            let value = [UInt8](repeating: UInt8(truncatingIfNeeded: random.next()), count: random.int(10) == 0 ? 5_000 : random.int(200))
                            try txn.put(db, key, value)
                            model[db.name]![key] = value
                        }
                    }
                }
            }
            let structure = try env.checkStructure()
            #expect(structure.isSound, "\(structure.issues.prefix(5))")
            #expect(structure.freePages > 0)
        }
        let (env, dbs) = try Self.open(dir.path, tables.map(\.name))
        for db in dbs {
            let read = try Self.contents(env, db)
            let expected = model[db.name]!.sorted { $0.key.lexicographicallyPrecedes($1.key) }
            #expect(read.count == expected.count, "\(db.name)")
            let same = read.elementsEqual(expected) { $0.0 == $1.key && $0.1 == $1.value }
            #expect(same, "\(db.name)")
        }
    }
}
