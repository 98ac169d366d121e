import Foundation
import LMDB
import Testing
import TopicStore

/// A data.mdb cut short (a backup copy that stopped early, a full disk) or cut to
/// nothing. LMDB reads its meta pages with read() at open and maps the rest, so a
/// review found every command killed by SIGBUS at the first page past the end of
/// the file (exit 135), and an empty file refused with "Bad file descriptor" (exit 1).
@Suite struct TruncatedStoreTests: RunsTopicstore {
    static let commands = """
    {"project":"demo","type":"token","device_id":"D1","token":"tokA","platform":"ios"}
    {"project":"demo","type":"register","device_id":"D1","topics":["news"]}
    {"project":"demo","type":"token","device_id":"D2","token":"tokB","platform":"android"}
    {"project":"demo","type":"register","device_id":"D2","topics":["news","sport"]}
    {"project":"demo","type":"register","device_id":"D3","topics":["news"]}
    """

    /// The bytes the store's newest meta page says its pages take.
    func usedBytes(_ directory: String) throws -> Int {
        var options = Environment.Options()
        options.readOnly = true
        return try Environment(path: directory, options: options).info().usedBytes
    }

    /// A copy of `store`'s data.mdb, alone, in `directory`, cut to `size` bytes.
    func cutCopy(of store: String, to directory: String, size: Int) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: store + "/data.mdb", toPath: directory + "/data.mdb")
        #expect(truncate(directory + "/data.mdb", off_t(size)) == 0)
    }

    /// What the command left of data.mdb: the file is never repaired, extended or initialized.
    func dataFile(_ directory: String) -> Data? { FileManager.default.contents(atPath: directory + "/data.mdb") }

    /// Just over the two meta pages, half the file, one page short: every command,
    /// readers and writers, refuses with exit 4 and names the file, its size and the
    /// size the meta page asks for; the file is left as it was.
    @Test func everyCommandRefusesATruncatedFile() throws {
        let dir = TemporaryDirectory("truncated")
        let store = try loadedStore(dir, Self.commands)
        let full = try FileManager.default.attributesOfItem(atPath: store + "/data.mdb")[.size] as! Int
        let needed = try usedBytes(store)
        #expect(full == needed && full >= 8 * 4096, "a store whose every page is written (\(full) bytes, \(needed) used)")
        for size in [3 * 4096, full / 2 / 4096 * 4096, full - 4096] {
            let cut = dir.sub("cut-\(size)")
            try cutCopy(of: store, to: cut, size: size)
            let before = dataFile(cut)
            let commands: [[String]] = [["stats"], ["audit"], ["audience", "--project", "demo", "news"],
                                        ["device", "--project", "demo", "D1"], ["load", "-"]]
            for command in commands {
                let r = try topicstore(command + ["--data", cut],
                                       stdin: #"{"project":"demo","type":"register","device_id":"D9","topics":["news"]}"#)
                #expect(r.status == 4, "\(command) at \(size) bytes: exit \(r.status) \(r.stderr.prefix(300))")
                #expect(r.stderr.contains("\(cut)/data.mdb is truncated"), "\(command): \(r.stderr.prefix(300))")
                #expect(r.stderr.contains("\(size) bytes") && r.stderr.contains("\(needed) bytes"), "\(command): \(r.stderr.prefix(300))")
                #expect(dataFile(cut) == before, "\(command) changed the truncated file")
            }
            let serve = try runWithDeadline(["serve", "--data", cut, "--listen", "127.0.0.1:0", "--quiet"])
            #expect(serve.status == 4, "serve at \(size) bytes: \(String(describing: serve.status)) \(serve.stderr.prefix(300))")
            #expect(serve.stderr.contains("\(cut)/data.mdb is truncated"), "serve: \(serve.stderr.prefix(300))")
            #expect(dataFile(cut) == before, "serve changed the truncated file")
        }
    }

    /// A file that keeps its first meta page and not the second is cut short too, not garbage.
    @Test func aFileShorterThanTheTwoMetaPagesIsTruncated() throws {
        let dir = TemporaryDirectory("truncated-meta")
        let store = try loadedStore(dir, Self.commands)
        for size in [4096, 4096 + 100] {
            let cut = dir.sub("cut-\(size)")
            try cutCopy(of: store, to: cut, size: size)
            for command in [["stats"], ["load", "-"]] {
                let r = try topicstore(command + ["--data", cut], stdin: "")
                #expect(r.status == 4, "\(command) at \(size) bytes: exit \(r.status) \(r.stderr.prefix(300))")
                #expect(r.stderr.contains("\(cut)/data.mdb is truncated") && r.stderr.contains("\(size) bytes"),
                        "\(command): \(r.stderr.prefix(300))")
                #expect(dataFile(cut)?.count == size)
            }
        }
    }

    /// In a store that file compaction moved to a generation directory, the file named is that generation's.
    @Test func aTruncatedGenerationIsNamed() throws {
        let dir = TemporaryDirectory("truncated-gen")
        let store = try loadedStore(dir, Self.commands)
        let moved = dir.sub("moved")
        try cutCopy(of: store, to: moved + "/g000001", size: 3 * 4096)
        try "g000001\n".write(toFile: moved + "/CURRENT", atomically: true, encoding: .utf8)
        for command in [["stats"], ["load", "-"]] {
            let r = try topicstore(command + ["--data", moved], stdin: "")
            #expect(r.status == 4, "\(command): exit \(r.status) \(r.stderr.prefix(300))")
            #expect(r.stderr.contains("\(moved)/g000001/data.mdb is truncated"), "\(command): \(r.stderr.prefix(300))")
        }
    }

    /// An empty data.mdb is not a store (exit 3), and no writer makes it one.
    @Test func anEmptyFileIsNotAStoreAndStaysEmpty() throws {
        let dir = TemporaryDirectory("empty")
        let empty = dir.sub("empty")
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: empty + "/data.mdb", contents: nil))
        for command in [["stats"], ["audit"], ["audience", "--project", "demo", "news"], ["load", "-"],
                        ["project", "add", "shop"], ["compact", "--retain", "30d"]] {
            let r = try topicstore(command + ["--data", empty], stdin: #"{"project":"demo","type":"register","device_id":"D9","topics":["news"]}"#)
            #expect(r.status == 3, "\(command): exit \(r.status) \(r.stderr.prefix(300))")
            #expect(r.stderr.contains("\(empty) is not a topicstore database: data.mdb is empty"), "\(command): \(r.stderr.prefix(300))")
            #expect(dataFile(empty)?.count == 0, "\(command) wrote into the empty file")
        }
        let serve = try runWithDeadline(["serve", "--data", empty, "--listen", "127.0.0.1:0", "--quiet"])
        #expect(serve.status == 3, "serve: \(String(describing: serve.status)) \(serve.stderr.prefix(300))")
        #expect(dataFile(empty)?.count == 0, "serve wrote into the empty file")
    }

    // MARK: the environment and the store

    /// Refused at open, before anything reads a page through the map: read-only and
    /// for writing (which must not extend the file either).
    @Test func anEnvironmentRefusesAFileCutShort() throws {
        let dir = TemporaryDirectory("env-cut")
        let source = dir.sub("source")
        try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: true)
        do {
            let env = try Environment(path: source)
            let db = try env.openDatabases(["t"], create: true)[0]
            try env.write { txn in
                for i in 0..<2000 { try txn.put(db, Array("key\(i)".utf8), [UInt8](repeating: UInt8(i & 0xFF), count: 100)) }
            }
        }
        let needed = try usedBytes(source)
        let cut = dir.sub("cut")
        try cutCopy(of: source, to: cut, size: needed / 2 / 4096 * 4096)
        for readOnly in [true, false] {
            var options = Environment.Options()
            options.readOnly = readOnly
            do {
                _ = try Environment(path: cut, options: options)
                Issue.record("opened a truncated file (readOnly: \(readOnly))")
            } catch let error as TruncatedDataFile {
                #expect(error.file == cut + "/data.mdb" && error.size == needed / 2 / 4096 * 4096 && error.needed == needed, "\(error)")
            }
            #expect(dataFile(cut)?.count == needed / 2 / 4096 * 4096)
        }
        // Closed again: the directory can be opened in this process once the file is whole.
        try FileManager.default.removeItem(atPath: cut + "/data.mdb")
        try FileManager.default.copyItem(atPath: source + "/data.mdb", toPath: cut + "/data.mdb")
        _ = try Environment(path: cut)
    }

    /// LMDB does not write every page below its last page number: a page a transaction took
    /// from the end of the file and freed again before its commit stays unwritten (it is in
    /// the free list), so a healthy file can end before `(last page + 1) × page size`. Such
    /// a file opens; only missing pages that hold data make it truncated.
    @Test func aFileEndingInUnwrittenFreePagesOpens() throws {
        let dir = TemporaryDirectory("env-free-tail")
        var options = Environment.Options()
        options.noSync = true
        // The operations of a workload that left such an end after its commit 84 (seed 1).
        var random = SeededRandom(seed: 1)
        var shortBy = 0
        var written = 0
        var keys = Set<[UInt8]>()
        do {
            let env = try Environment(path: dir.path, options: options)
            let db = try env.openDatabases(["t"], create: true)[0]
            for _ in 0..<400 where shortBy == 0 {
                try env.write { txn in
                    for _ in 0..<(1 + random.int(200)) {
                        let k = random.int(5000)
                        let key = (0..<8).map { UInt8(ascii: "0") + UInt8((k >> (3 * (7 - $0))) & 7) }
                        if random.int(3) == 0 {
                            if try txn.delete(db, key) { keys.remove(key) }
                        } else {
                            try txn.put(db, key, [UInt8](repeating: 7, count: random.int(10) == 0 ? random.int(20000) : random.int(300)))
                            keys.insert(key)
                        }
                    }
                }
                written = try FileManager.default.attributesOfItem(atPath: dir.path + "/data.mdb")[.size] as! Int
                shortBy = env.info().usedBytes - written
            }
        }
        try #require(shortBy > 0, "the workload left every page written; the test needs a file that ends in free pages")
        for readOnly in [true, false] {
            options.readOnly = readOnly
            let env = try Environment(path: dir.path, options: options)
            #expect(env.info().usedBytes - written == shortBy)
            let db = try env.openDatabases(["t"], create: false)[0]
            let count = try env.read { txn in try txn.statistics(db).entries }
            #expect(count == keys.count)
        }
        // One page more cut off, and a page that holds data is missing.
        #expect(truncate(dir.path + "/data.mdb", off_t(written - 4096)) == 0)
        #expect(throws: TruncatedDataFile.self) { try Environment(path: dir.path, options: options) }
    }

    /// Through the store, read-only or for writing: a truncated file throws `TruncatedDataFile`
    /// (exit 4 on the command line).
    @Test func aStoreRefusesATruncatedFile() throws {
        let dir = TemporaryDirectory("store-cut")
        let store = try loadedStore(dir, Self.commands)
        let size = try usedBytes(store) / 2 / 4096 * 4096
        for readOnly in [true, false] {
            var options = TopicStore.Options()
            options.readOnly = readOnly
            let cut = dir.sub("cut-\(readOnly)")
            try cutCopy(of: store, to: cut, size: size)
            #expect(throws: TruncatedDataFile.self) { try TopicStore(directory: cut, options: options) }
            #expect(dataFile(cut)?.count == size)
        }
    }

    /// Through the store, read-only or for writing: an empty file is `StoreError.notADatabase`
    /// (exit 3), and stays empty.
    @Test func aStoreRefusesAnEmptyFile() throws {
        let dir = TemporaryDirectory("store-empty")
        for readOnly in [true, false] {
            var options = TopicStore.Options()
            options.readOnly = readOnly
            let empty = dir.sub("empty-\(readOnly)")
            try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
            #expect(FileManager.default.createFile(atPath: empty + "/data.mdb", contents: nil))
            do {
                _ = try TopicStore(directory: empty, options: options)
                Issue.record("opened an empty data.mdb (readOnly: \(readOnly))")
            } catch StoreError.notADatabase(let path, let reason) {
                #expect(path == empty && reason.hasPrefix("data.mdb is empty"), "\(reason)")
            }
            #expect(dataFile(empty)?.count == 0)
        }
    }
}
