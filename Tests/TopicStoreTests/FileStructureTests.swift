import Foundation
import LMDB
import SubscriptionLog
import Testing
import TopicStore

/// `audit` walks data.mdb page by page (through its own map of the file, or with
/// pread) before anything is read through LMDB (`Environment.checkStructure`). A corruption review found one damaged page
/// killing every command (SIGSEGV, SIGBUS or an LMDB assertion, `audit` included), a
/// flipped branch key hiding entries from lookups while `audit` passed, and a stale meta
/// page rolling the store back silently: each is now found and located.
@Suite struct FileStructureTests: RunsTopicstore {
    static let pageSize = 4096

    /// A closed store with a log of a few hundred pages (so its tree has branch pages),
    /// churned so that the free list holds pages.
    func makeStore(_ dir: TemporaryDirectory) throws -> String {
        let path = dir.sub("data")
        let store = try TopicStore(directory: path)
        var events: [Event] = []
        for i in 0..<3_000 {
            events.append(Event(project: "demo", body: .token(deviceID: "device-\(i)", token: String(repeating: "ab", count: 32) + "\(i)", platform: i % 3 == 0 ? .android : .ios)))
            events.append(Event(project: "demo", body: .register(deviceID: "device-\(i)", topics: [TopicSpec(code: "all"), TopicSpec(code: "t\(i % 17)"),
                                                                                               TopicSpec(code: "user.\(i)", single: true)])))
        }
        for chunk in stride(from: 0, to: events.count, by: 500) {
            for r in store.submitAndWait(Array(events[chunk..<min(chunk + 500, events.count)])) { _ = try r.get() }
        }
        for i in stride(from: 0, to: 3_000, by: 7) {
            try store.submitAndWait(Event(project: "demo", body: .unregister(deviceID: "device-\(i)", codes: ["t\(i % 17)"])))
        }
        store.close()
        return path
    }

    /// Pages of data.mdb: number, flags, the first node's key and value bytes.
    struct Page {
        var number: Int
        var flags: Int
        var bytes: [UInt8]
        var nodes: Int { (Int(bytes[12]) | Int(bytes[13]) << 8 - 16) / 2 }
        func node(_ i: Int) -> Int { Int(bytes[16 + 2 * i]) | Int(bytes[17 + 2 * i]) << 8 }
        func keySize(_ i: Int) -> Int { let n = node(i); return Int(bytes[n + 6]) | Int(bytes[n + 7]) << 8 }
        func key(_ i: Int) -> [UInt8] { let n = node(i); return Array(bytes[n + 8..<n + 8 + keySize(i)]) }
        func value(_ i: Int) -> [UInt8] {
            let n = node(i), size = Int(bytes[n]) | Int(bytes[n + 1]) << 8
            return Array(bytes[n + 8 + keySize(i)..<min(bytes.count, n + 8 + keySize(i) + size)])
        }
    }

    func pages(_ store: String) throws -> [Page] {
        let data = try [UInt8](Data(contentsOf: URL(fileURLWithPath: store + "/data.mdb")))
        return stride(from: 2 * Self.pageSize, to: data.count, by: Self.pageSize).map { at in
            let bytes = Array(data[at..<at + Self.pageSize])
            return Page(number: at / Self.pageSize, flags: Int(bytes[10]) | Int(bytes[11]) << 8, bytes: bytes)
        }.filter { $0.number == Int(UInt64(littleEndian: $0.bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) })) }
    }

    /// The log's leaf pages hold 8-byte sequence keys and records of version 2.
    func isLogLeaf(_ p: Page) -> Bool { p.flags == 2 && p.nodes > 0 && p.keySize(0) == 8 && RecordCodec.chainedVersions.contains(p.value(0).first ?? 0) && p.value(0).count > 20 }

    /// The root page of `table`, from the newest meta page's main tree (one leaf here);
    /// of the free list when `table` is nil.
    func tableRoot(_ store: String, _ table: String?) throws -> Int {
        let data = try [UInt8](Data(contentsOf: URL(fileURLWithPath: store + "/data.mdb")))
        func word(_ at: Int) -> Int { Int(UInt64(littleEndian: data.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: UInt64.self) })) }
        let meta = word(16 + 128) > word(Self.pageSize + 16 + 128) ? 0 : 1
        guard let table else { return word(meta * Self.pageSize + 16 + 24 + 40) }
        let mainRoot = word(meta * Self.pageSize + 16 + 24 + 48 + 40)
        let main = try #require(try pages(store).first { $0.number == mainRoot && $0.flags == 2 })
        let i = try #require((0..<main.nodes).first { main.key($0) == Array(table.utf8) })
        return main.value(i).withUnsafeBytes { Int(UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: 40, as: UInt64.self))) }
    }

    func write(_ store: String, page: Int, _ bytes: [UInt8], at offset: Int = 0) throws {
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: store + "/data.mdb"))
        try handle.seek(toOffset: UInt64(page * Self.pageSize + offset))
        try handle.write(contentsOf: bytes)
        try handle.close()
    }

    func copy(_ store: String, _ dir: TemporaryDirectory, _ name: String) throws -> String {
        let to = dir.sub(name)
        try FileManager.default.createDirectory(atPath: to, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: store + "/data.mdb", toPath: to + "/data.mdb")
        return to
    }

    /// LMDB overwrites a value on overflow pages written in the same transaction in
    /// place, a smaller one too, and keeps the run: a value of 150 bytes on two
    /// overflow pages is LMDB's own doing, not damage (the walk used to report it,
    /// and the run's second page as in no table).
    @Test func anOverflowRunLongerThanItsValueIsLMDBsOwn() throws {
        let dir = TemporaryDirectory("structure")
        var options = Environment.Options()
        options.mapSize = 16 << 20
        let env = try Environment(path: dir.path, options: options)
        let db = try env.openDatabases(["values"], create: true)[0]
        try env.write { txn in
            for i in 0..<20 as Range<UInt8> {
                try txn.put(db, [i], [UInt8](repeating: i, count: 6_000))
                if i % 2 == 0 { try txn.put(db, [i], [UInt8](repeating: i, count: 150)) }
            }
        }
        let file = try env.checkStructure()
        #expect(file.isSound, "\(file.issues.prefix(3))")
        let values = try #require(file.tables.first { $0.name == "values" })
        #expect(values.overflowPages == 20 * 2)
        let small = try env.read { txn in try txn.get(db, [4]).map { Array($0) } }
        #expect(small == [UInt8](repeating: 4, count: 150))
    }

    @Test func aSoundStoreWalksCleanAndCountsEveryTable() throws {
        let dir = TemporaryDirectory("structure")
        let store = try makeStore(dir)
        let file = try TopicStore.checkFileStructure(directory: store)
        #expect(file.isSound, "\(file.issues)")
        let log = try #require(file.tables.first { $0.name == "log" })
        #expect(log.entries == 6_000 + 429 && log.depth >= 2 && log.branchPages >= 1)
        #expect(file.tables.contains { $0.name == "postings" } && file.tables.contains { $0.name == "(free list)" })
        #expect(file.freePages > 0, "churn frees pages")
        // Every page is in one tree or free: the walk's counts add up to the file.
        let inTrees = file.tables.reduce(0) { $0 + $1.branchPages + $1.leafPages + $1.overflowPages }
        #expect(inTrees + file.freePages == file.lastPage - 1, "\(inTrees) + \(file.freePages) of pages 2…\(file.lastPage)")
        // And the CLI says so before the rest of the audit.
        let audit = try topicstore(["audit", "--data", store])
        #expect(audit.status == 0, "\(audit.stdout)\(audit.stderr)")
        #expect(audit.stdout.hasPrefix("file: \(file.lastPage + 1) pages of 4096 bytes walked"), "\(audit.stdout)")
        let fileOnly = try topicstore(["audit", "--data", store, "--file-only"])
        #expect(fileOnly.status == 0 && fileOnly.stdout.contains("OK (the file only") && !fileOnly.stdout.contains("head:"), "\(fileOnly.stdout)")
    }

    @Test func theWalkBesideAWriterInAnotherProcessFindsNothing() throws {
        // Its read transaction pins the snapshot it walks: pages the writer frees and
        // reuses meanwhile are never pages of that snapshot.
        let dir = TemporaryDirectory("structure")
        let store = try makeStore(dir)
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: BuiltProducts.executable("topicstore-stress"))
        writer.arguments = [store, "2", "walk"]
        writer.standardOutput = FileHandle.nullDevice
        try writer.run()
        defer { kill(writer.processIdentifier, SIGKILL); writer.waitUntilExit() }
        var transactions = Set<Int>()
        for _ in 0..<15 {
            let file = try TopicStore.checkFileStructure(directory: store)
            #expect(file.isSound, "\(file.issues.prefix(5))")
            transactions.insert(file.transactionID)
            usleep(50_000)
        }
        #expect(transactions.count >= 5, "the writer committed between the walks: \(transactions.sorted())")
    }

    @Test func aZeroedLogPageIsLocatedAndAuditStopsBeforeLMDBReadsIt() throws {
        let dir = TemporaryDirectory("structure")
        let store = try makeStore(dir)
        let leaf = try #require(try pages(store).first(where: isLogLeaf))
        let damaged = try copy(store, dir, "zeroed")
        try write(damaged, page: leaf.number, [UInt8](repeating: 0, count: Self.pageSize))
        let file = try TopicStore.checkFileStructure(directory: damaged)
        #expect(file.issues.contains { $0.table == "log" && $0.page == leaf.number && $0.message.contains("its header says it is page 0") },
                "\(file.issues)")
        let audit = try topicstore(["audit", "--data", damaged])
        #expect(audit.status == 4, "exit \(audit.status): \(audit.stderr.prefix(300))")
        #expect(audit.stdout.contains("log: page \(leaf.number) (data.mdb offset \(leaf.number * Self.pageSize))"), "\(audit.stdout)")
        #expect(audit.stdout.contains("log and projections: not read"), "\(audit.stdout)")
        #expect(try topicstore(["audit", "--data", damaged, "--file-only"]).status == 4)
        // A server does not start on it: its writes would go through LMDB's free list and trees.
        let serve = try runWithDeadline(["serve", "--data", damaged, "--listen", "127.0.0.1:0", "--quiet"])
        #expect(serve.status == 4, "serve: \(String(describing: serve.status)) \(serve.stderr.prefix(300))")
        #expect(serve.stderr.contains("data.mdb is damaged; not serving it") && serve.stderr.contains("log: page \(leaf.number)"),
                "\(serve.stderr.prefix(500))")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(topicstore(["audit", "--data", damaged, "--json"]).stdout.utf8)) as? [String: Any])
        #expect(json["ok"] as? Bool == false && (json["file"] as? [String: Any])?["issueCount"] as? Int ?? 0 >= 1)
    }

    @Test func aBranchKeyOutOfOrderIsFound() throws {
        // A point lookup follows the branch keys, so a damaged one hides entries that a
        // walk of the leaves in order still finds: the walk checks every leaf key against
        // the branch keys that lead to it.
        let dir = TemporaryDirectory("structure")
        let store = try makeStore(dir)
        let root = try tableRoot(store, "log")
        let branch = try #require(try pages(store).first { $0.number == root })
        #expect(branch.flags == 1 && branch.nodes >= 3, "the log's root is a branch page")
        let damaged = try copy(store, dir, "branch")
        // Node 1's key (big-endian numbers) made larger than node 2's.
        try write(damaged, page: branch.number, [0xFF], at: branch.node(1) + 8)
        let file = try TopicStore.checkFileStructure(directory: damaged)
        #expect(file.issues.contains { $0.page == branch.number && $0.message.contains("node 2's key is not above node 1's: keys out of order") },
                "\(file.issues)")
    }

    @Test func aPageInTwoTablesIsFoundWhicheverThreadsWalkThem() throws {
        // The tables are walked on two threads, each marking the pages it reaches; a
        // page both reach (here the log's root names the root of `devices` as a child)
        // is found when their marks are merged, and named with both tables.
        let dir = TemporaryDirectory("structure")
        let store = try makeStore(dir)
        let logRoot = try tableRoot(store, "log"), devicesRoot = try tableRoot(store, "devices")
        let branch = try #require(try pages(store).first { $0.number == logRoot })
        #expect(branch.flags == 1 && branch.nodes >= 3, "the log's root is a branch page")
        let damaged = try copy(store, dir, "shared")
        // A branch node's child page number: its first six bytes, little-endian 16-bit thirds.
        let child = (0..<3).flatMap { third in [UInt8(truncatingIfNeeded: devicesRoot >> (16 * third)), UInt8(truncatingIfNeeded: devicesRoot >> (16 * third + 8))] }
        try write(damaged, page: logRoot, child, at: branch.node(1))
        let file = try TopicStore.checkFileStructure(directory: damaged)
        #expect(file.issues.contains { issue in
            issue.page == devicesRoot && issue.message.contains("reached twice")
                && (issue.table == "log" && issue.message.contains("a page of devices") || issue.table == "devices" && issue.message.contains("a page of log"))
        }, "\(file.issues)")
        // The tables are reported in the file's order, whichever thread walked them.
        let sound = try TopicStore.checkFileStructure(directory: store)
        let names = sound.tables.map(\.name)
        #expect(names.prefix(2) == ["(free list)", "(main)"] && names.dropFirst(2).elementsEqual(names.dropFirst(2).sorted()) && names.contains("devices"),
                "\(names)")
    }

    @Test func aStaleMetaPageIsFound() throws {
        // The older meta page copied over the newer: LMDB opens the older snapshot
        // (acknowledged commits vanish) and nothing else looks wrong.
        let dir = TemporaryDirectory("structure")
        let store = try makeStore(dir)
        let data = try [UInt8](Data(contentsOf: URL(fileURLWithPath: store + "/data.mdb")))
        func txn(_ page: Int) -> Int { Int(UInt64(littleEndian: data.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: page * Self.pageSize + 16 + 128, as: UInt64.self) })) }
        let newer = txn(0) > txn(1) ? 0 : 1
        let damaged = try copy(store, dir, "stale-meta")
        try write(damaged, page: newer, Array(data[(1 - newer) * Self.pageSize..<(2 - newer) * Self.pageSize]))
        let file = try TopicStore.checkFileStructure(directory: damaged)
        #expect(file.issues.contains { $0.table == "(meta)" && $0.page == newer && $0.message.contains("stale copy") }, "\(file.issues)")
        #expect(try topicstore(["audit", "--data", damaged]).status == 4)
    }

    @Test func aFreeListNamingAPageInUseIsFound() throws {
        let dir = TemporaryDirectory("structure")
        let store = try makeStore(dir)
        let file = try TopicStore.checkFileStructure(directory: store)
        let free = try #require(file.tables.first { $0.name == "(free list)" })
        #expect(free.leafPages >= 1)
        // The free list's leaf (its root, named by the newest meta page; a freed page
        // may still hold an old copy): 8-byte transaction keys whose values are page
        // lists (a count, then page numbers); its first listed page made a page of the log.
        let all = try pages(store)
        let leaf = try #require(all.first(where: isLogLeaf))
        let root = try tableRoot(store, nil)
        let list = try #require(all.first { p in
            p.number == root && p.flags == 2 && p.nodes >= 1 && p.keySize(0) == 8 && p.value(0).count >= 16
                && p.value(0).withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) } == UInt64(p.value(0).count / 8 - 1)
        }, "the free list's leaf, its first list inline")
        let damaged = try copy(store, dir, "free")
        var number = UInt64(leaf.number).littleEndian
        try write(damaged, page: list.number, withUnsafeBytes(of: &number) { Array($0) }, at: list.node(0) + 8 + 8 + 8)
        let issues = try TopicStore.checkFileStructure(directory: damaged).issues
        #expect(issues.contains { $0.table == "(free list)" && $0.message.contains("lists page \(leaf.number) as free; it is a page of log") }, "\(issues)")
    }

    @Test(arguments: [1, 2] as [UInt64])
    func randomDamageNeverKillsTheWalk(seed: UInt64) throws {
        // Flips anywhere in the pages in use, most of them in page headers and node
        // pointers: the walk reads only inside its page buffer, whatever the bytes.
        let dir = TemporaryDirectory("structure")
        let store = try makeStore(dir)
        let clean = try Data(contentsOf: URL(fileURLWithPath: store + "/data.mdb"))
        var rng = SeededRandom(seed: seed)
        var found = 0
        let damaged = try copy(store, dir, "random")
        for _ in 0..<60 {
            try clean.write(to: URL(fileURLWithPath: damaged + "/data.mdb"))
            try? FileManager.default.removeItem(atPath: damaged + "/lock.mdb")
            let page = 2 + rng.int(clean.count / Self.pageSize - 2)
            for _ in 0..<(1 + rng.int(4)) {
                let offset = rng.int(2) == 0 ? rng.int(32) : rng.int(Self.pageSize)
                try write(damaged, page: page, [UInt8(1 + rng.int(255))], at: offset)
            }
            let file = try TopicStore.checkFileStructure(directory: damaged)
            if !file.isSound { found += 1 }
            // Pages read with pread (when the file cannot be mapped) give the same findings.
            let unmapped = try TopicStore.checkFileStructure(directory: damaged, maxIssues: 1000, readingThroughMap: false)
            #expect(unmapped.issues.map(\.description) == file.issues.map(\.description) && unmapped.issueCount == file.issueCount
                    && unmapped.tables.map(\.entries) == file.tables.map(\.entries) && unmapped.freePages == file.freePages)
        }
        #expect(found >= 20, "damage found in \(found) of 60 pages")
    }
}
