internal import CLMDB
import Foundation

/// One thing wrong with the structure of an LMDB file: where (the table, the
/// page and its byte offset in data.mdb) and what.
public struct StructureIssue: Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable {
        /// A page, node, overflow run, free-list entry or meta page that LMDB cannot
        /// safely read or would misuse.
        case structure
        /// Keys of a leaf page out of order, or outside the range its branch keys give,
        /// in a page otherwise whole: a cursor walk reads it, a lookup may miss.
        case keyOrder
        /// A table's page or entry counts differ from its record's.
        case counts
    }

    /// The table whose tree holds the page: a table name, `(main)` (the table of
    /// tables), `(free list)`, or `(meta)` for LMDB's two meta pages.
    public let table: String
    public let page: Int?
    public let offset: Int?
    public let message: String
    public let kind: Kind

    public var description: String {
        guard let page, let offset else { return "\(table): \(message)" }
        return "\(table): page \(page) (data.mdb offset \(offset)): \(message)"
    }
}

/// What a walk of every page of an LMDB file found (`Environment.checkStructure`).
public struct FileStructure: Sendable {
    public struct Table: Sendable {
        public var name: String
        public var depth: Int
        public var branchPages = 0, leafPages = 0, overflowPages = 0, entries = 0
    }

    /// The snapshot walked (its meta page's transaction).
    public var transactionID = 0
    public var pageSize = 0
    /// The highest page number of that snapshot; pages 2… are walked.
    public var lastPage = 0
    public var tables: [Table] = []
    public var freePages = 0
    /// The first `maxIssues` issues; `issueCount` counts them all.
    public var issues: [StructureIssue] = []
    public var issueCount = 0
    public var isSound: Bool { issueCount == 0 }
}

extension Environment {
    /// Walks every tree of the file from the newest snapshot's meta page, reading
    /// pages through a map of the file's own length (`MappedFile`), never through
    /// LMDB's, so damage cannot kill the process, and checks what LMDB itself
    /// trusts: the meta pages, every page's number, kind and node layout, key
    /// order within pages and against the branch keys above them (a point lookup
    /// follows those), the depth of every leaf, overflow pages, each table's page
    /// and entry counts against its record, and that every page up to the last is
    /// in exactly one tree or on the free list. The tables are walked on two threads.
    ///
    /// A read transaction pins the snapshot while it is walked, so this runs beside
    /// writers (in any process) without blocking them.
    public func checkStructure(maxIssues: Int = 1000) throws -> FileStructure {
        try checkStructure(maxIssues: maxIssues, readingThroughMap: true)
    }

    /// `checkStructure`, reading pages with pread instead of through a map of the
    /// file when `readingThroughMap` is false (as it does when the file cannot be mapped).
    package func checkStructure(maxIssues: Int, readingThroughMap: Bool) throws -> FileStructure {
        var fd: mdb_filehandle_t = -1
        guard mdb_env_get_fd(pointer, &fd) == 0, fd >= 0 else { throw LMDBError.invalid }
        let pageSize = info().pageSize
        var result = FileStructure()
        var metaIssues: [StructureIssue] = []
        // The two meta pages: LMDB writes transaction t's into page t % 2, so each holds a
        // transaction of its own parity, one after the other (both 0 in a new file). A page
        // holding the other parity is a stale copy: the store was rolled back to it.
        let metas = (0..<2).map { DataFile.meta(fd, page: $0, pageSize: pageSize) }
        for (page, meta) in metas.enumerated() {
            guard let meta else {
                metaIssues.append(StructureIssue(table: "(meta)", page: page, offset: page * pageSize,
                                                 message: "not a valid meta page (magic, version, page size or last page)", kind: .structure))
                continue
            }
            if meta.transactionID != 0 && meta.transactionID % 2 != page {
                metaIssues.append(StructureIssue(table: "(meta)", page: page, offset: page * pageSize,
                                                 message: "holds transaction \(meta.transactionID), which LMDB writes into meta page \(1 - page): "
                                                 + "a stale copy of an older meta page; the store may have been rolled back to that transaction",
                                                 kind: .structure))
            }
        }
        if let a = metas[0], let b = metas[1], metaIssues.isEmpty, abs(a.transactionID - b.transactionID) != 1,
           !(a.transactionID == 0 && b.transactionID == 0) {
            metaIssues.append(StructureIssue(table: "(meta)", page: nil, offset: nil,
                                             message: "the meta pages hold transactions \(a.transactionID) and \(b.transactionID), which are not consecutive: one was not written or was restored from an older copy",
                                             kind: .structure))
        }
        for _ in 0..<100 {
            let txn = try Transaction(environment: self, readOnly: true)
            let snapshot = txn.id
            let current = (0..<2).compactMap { DataFile.meta(fd, page: $0, pageSize: pageSize) }
            guard let meta = current.first(where: { $0.transactionID == snapshot }) else {
                txn.abort()
                if current.count < 2, !metaIssues.isEmpty { break }  // the snapshot's meta page is the damaged one
                continue  // two commits since the transaction began overwrote its meta page: again
            }
            let file = readingThroughMap ? MappedFile(fd: fd) : MappedFile(unmapped: ())
            var walk = StructureWalk(fd: fd, file: file.bytes, meta: meta, maxIssues: maxIssues)
            walk.issues = metaIssues
            walk.issueCount = metaIssues.count
            walk.run()  // while `txn` keeps the snapshot's pages from being reused
            txn.abort()
            file.unmap()
            result.transactionID = meta.transactionID
            result.pageSize = meta.pageSize
            result.lastPage = meta.lastPage
            result.tables = walk.tables
            result.freePages = walk.freePages
            result.issues = Array(walk.issues.prefix(maxIssues))
            result.issueCount = walk.issueCount
            return result
        }
        result.pageSize = pageSize
        result.issues = Array(metaIssues.prefix(maxIssues))
        result.issueCount = metaIssues.count
        if metaIssues.isEmpty {
            // Writers committed twice during each of a hundred tries: nothing to say about the file.
            throw LMDBError.wouldBlock
        }
        return result
    }
}

/// The data file mapped for reading, as long as it was when mapped (nil when it
/// cannot be mapped: the walk then reads each page with pread).
///
/// A page is read through this map only when it lies within that length, so a
/// damaged page number can name no byte outside it. LMDB's own map is not used:
/// it spans the map size, past the file's end, where a read faults.
struct MappedFile {
    let bytes: UnsafeRawBufferPointer?

    init(fd: Int32) {
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_size > 0,
              let base = mmap(nil, Int(st.st_size), PROT_READ, MAP_SHARED, fd, 0), base != MAP_FAILED else {
            bytes = nil
            return
        }
        bytes = UnsafeRawBufferPointer(start: base, count: Int(st.st_size))
    }

    init(unmapped: Void) { bytes = nil }

    func unmap() {
        if let bytes, let base = bytes.baseAddress { munmap(UnsafeMutableRawPointer(mutating: base), bytes.count) }
    }
}

/// The walk itself: page numbers owned by which tree, issues as they are found.
struct StructureWalk {
    let fd: Int32
    /// The file's bytes (`MappedFile`), or nil: pages are then read with pread.
    let file: UnsafeRawBufferPointer?
    let meta: DataFile.Meta
    let maxIssues: Int
    var issues: [StructureIssue] = []
    var issueCount = 0
    var tables: [FileStructure.Table] = []
    /// Each walked table's tag (1 + its place in the file's order of tables), beside `tables`.
    private var tableTags: [UInt16] = []
    /// The tables' names by tag - 1: the free list, the main table, then those the main table names.
    private var names: [String] = []
    var freePages = 0
    /// The free list's records (their page lists), applied after every tree is walked.
    private var freeLists: [(value: [UInt8], page: Int, node: Int)] = []
    /// Per page: 0 not reached, `freeOwner` on the free list, else 1 + the index of its table.
    private var owner: [UInt16]
    private static let freeOwner = UInt16.max
    /// The page just read (`read(_:)`), copied out of the file: whatever its bytes
    /// say, the walk reads nothing outside it.
    private let buffer: UnsafeMutableRawBufferPointer
    private var page: UnsafeRawBufferPointer { UnsafeRawBufferPointer(buffer) }
    private var pageSize: Int { meta.pageSize }

    // mdb.c: page flags, node flags, the table record (MDB_db) and its flags.
    private static let branch = 0x01, leaf = 0x02, overflow = 0x04, metaPage = 0x08, leaf2 = 0x20, subPage = 0x40
    private static let bigData = 0x01, subData = 0x02, dupData = 0x04
    private static let dupSort = 0x04, integerKey = 0x08, reverseKey = 0x02
    private static let nodeHeader = 8, recordSize = 48

    init(fd: Int32, file: UnsafeRawBufferPointer?, meta: DataFile.Meta, maxIssues: Int) {
        self.fd = fd
        self.file = file
        self.meta = meta
        self.maxIssues = maxIssues
        owner = [UInt16](repeating: 0, count: meta.lastPage + 1)
        // Freed when `run` ends: the walk is a value run once, by `checkStructure`.
        buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: meta.pageSize, alignment: 8)
    }

    private mutating func issue(_ table: String, _ number: Int?, _ message: String, kind: StructureIssue.Kind = .structure) {
        issueCount += 1
        if issues.count < maxIssues {
            // A page number read from damaged bytes may be anything: an offset only for a page of the file.
            let offset = number.flatMap { $0 >= 0 && $0 <= meta.lastPage ? $0 * pageSize : nil }
            issues.append(StructureIssue(table: table, page: number, offset: offset, message: message, kind: kind))
        }
    }

    /// A table record (MDB_db) as the meta page or the main tree holds it.
    struct Record {
        var flags: Int, depth: Int, branchPages: Int, leafPages: Int, overflowPages: Int, entries: Int, root: Int
        init(_ b: UnsafeRawBufferPointer) {
            func w<T: FixedWidthInteger>(_ at: Int, _: T.Type) -> Int {
                Int(truncatingIfNeeded: T(littleEndian: b.loadUnaligned(fromByteOffset: at, as: T.self)))
            }
            flags = w(4, UInt16.self); depth = w(6, UInt16.self)
            branchPages = w(8, UInt64.self); leafPages = w(16, UInt64.self); overflowPages = w(24, UInt64.self)
            entries = w(32, UInt64.self); root = w(40, UInt64.self)
        }
    }

    mutating func run() {
        defer { buffer.deallocate() }
        guard let m = read(at: (meta.transactionID % 2) * pageSize + DataFile.pageHeader + 24, count: 2 * Self.recordSize) else {
            issue("(meta)", meta.transactionID % 2, "cannot be read")
            return
        }
        let (free, main) = m.withUnsafeBytes { (Record(UnsafeRawBufferPointer(rebasing: $0[0..<48])), Record(UnsafeRawBufferPointer(rebasing: $0[48..<96]))) }
        var named: [(String, Record)] = []
        names = ["(free list)", "(main)"]
        walk(table: "(free list)", free, tag: 1, isFreeList: true, named: &named)
        walk(table: "(main)", main, tag: 2, isFreeList: false, named: &named)
        names += named.map(\.0)
        // The tables in two groups of about as many pages (by their records), one
        // walked on a second thread with its own page marks, merged after: the walk
        // of a 10M-device store's file (6.7 GB) took 2.5–2.8 s on one thread, 1.7–1.8 s on two.
        let (mine, theirs) = Self.split(named.map(\.1), lastPage: meta.lastPage)
        if theirs.isEmpty {
            walkTables(mine, of: named)
        } else {
            let other = Sibling(StructureWalk(fd: fd, file: file, meta: meta, maxIssues: maxIssues))
            other.walk.names = names
            let done = DispatchSemaphore(value: 0)
            let tables = named
            startThread(named: "file-check") {
                other.walk.walkTables(theirs, of: tables)
                done.signal()
            }
            walkTables(mine, of: named)
            done.wait()
            other.walk.buffer.deallocate()
            absorb(other.walk)
        }
        // The free pages last, once every tree has claimed its own: a page listed as
        // free that a tree holds is then named with its tree.
        for list in freeLists { freeList(list.value, from: list.page, node: list.node) }
        // Every page is in one tree or on the free list: LMDB loses none.
        var lost = 0, first = -1
        for number in 2...max(2, meta.lastPage) where number <= meta.lastPage && owner[number] == 0 {
            lost += 1
            if first < 0 { first = number }
        }
        if lost > 0 {
            issue("(free list)", first, "\(lost) page(s) up to the last (\(meta.lastPage)) are in no table and not free, the first this one")
        }
    }

    /// The second thread's walk, handed to it and back.
    private final class Sibling: @unchecked Sendable {
        var walk: StructureWalk
        init(_ walk: StructureWalk) { self.walk = walk }
    }

    /// The indexes of `records` in two groups of about as many pages each (the largest
    /// first, each to the smaller group); a count beyond the file counts as the file.
    static func split(_ records: [Record], lastPage: Int) -> (mine: [Int], theirs: [Int]) {
        let pages = records.map { r in
            [r.branchPages, r.leafPages, r.overflowPages].reduce(0) { $0 + min(max($1, 0), lastPage) }
        }
        var mine: [Int] = [], theirs: [Int] = [], minePages = 0, theirPages = 0
        for i in records.indices.sorted(by: { pages[$0] > pages[$1] || (pages[$0] == pages[$1] && $0 < $1) }) {
            if minePages <= theirPages { mine.append(i); minePages += pages[i] } else { theirs.append(i); theirPages += pages[i] }
        }
        return (mine.sorted(), theirs.sorted())
    }

    /// Walks the tables `indices` of `named` (tagged 3 + their index: after the free list and the main table).
    private mutating func walkTables(_ indices: [Int], of named: [(String, Record)]) {
        for index in indices {
            let (name, record) = named[index]
            var none: [(String, Record)] = []
            walk(table: name, record, tag: UInt16(truncatingIfNeeded: index + 3), isFreeList: false, named: &none)
            for (inner, _) in none { issue(name, nil, "holds a table record (\(inner)), which only the main table holds") }
        }
    }

    /// Takes in what `other` walked: its tables (in the file's order), its issues,
    /// and its page marks. A page both walks reached is in two trees.
    private mutating func absorb(_ other: StructureWalk) {
        tables += other.tables
        tableTags += other.tableTags
        let order = tableTags.indices.sorted { tableTags[$0] < tableTags[$1] }
        tables = order.map { tables[$0] }
        tableTags = order.map { tableTags[$0] }
        issues += other.issues.prefix(max(0, maxIssues - issues.count))
        issueCount += other.issueCount
        for number in other.owner.indices where other.owner[number] != 0 {
            if owner[number] == 0 {
                owner[number] = other.owner[number]
            } else {
                issue(ownerTable(other.owner[number]), number, "reached twice (it is also \(ownerName(owner[number])))")
            }
        }
    }

    private func compare(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer, integer: Bool) -> Int {
        if integer, a.count == 8, b.count == 8 {
            let x = UInt64(littleEndian: a.loadUnaligned(as: UInt64.self)), y = UInt64(littleEndian: b.loadUnaligned(as: UInt64.self))
            return x < y ? -1 : x == y ? 0 : 1
        }
        // memcmp's order, eight bytes a step: keys are short, and a call of memcmp
        // per key was a fifth of a walk.
        let n = min(a.count, b.count)
        var i = 0
        while i + 8 <= n {
            let x = UInt64(bigEndian: a.loadUnaligned(fromByteOffset: i, as: UInt64.self))
            let y = UInt64(bigEndian: b.loadUnaligned(fromByteOffset: i, as: UInt64.self))
            if x != y { return x < y ? -1 : 1 }
            i += 8
        }
        while i < n {
            if a[i] != b[i] { return a[i] < b[i] ? -1 : 1 }
            i += 1
        }
        return a.count < b.count ? -1 : a.count == b.count ? 0 : 1
    }

    /// Walks one tree: every page reached once, each checked before anything in it is followed.
    private mutating func walk(table: String, _ record: Record, tag: UInt16, isFreeList: Bool, named: inout [(String, Record)]) {
        var stats = FileStructure.Table(name: table, depth: record.depth)
        defer { tables.append(stats); tableTags.append(tag) }
        if record.flags & (Self.dupSort | Self.reverseKey) != 0 {
            issue(table, nil, "has flags \(record.flags) (sorted duplicates or reversed keys), which topicstore never sets")
            return
        }
        let integer = isFreeList || record.flags & Self.integerKey != 0
        if record.root == DataFile.noPage {
            if record.depth != 0 || record.entries != 0 || record.branchPages + record.leafPages + record.overflowPages != 0 {
                issue(table, nil, "its record says it is empty (no root page) but counts \(record.entries) entries, depth \(record.depth)")
            }
            return
        }
        guard record.depth >= 1, record.depth <= 32 else {
            issue(table, nil, "its record gives a depth of \(record.depth)")
            return
        }
        // A page to visit: its number, its level (1 = the root), the keys that bound it
        // (from the branch keys above it; nil: unbounded), and the page that named it.
        struct Visit { var number: Int; var level: Int; var low: [UInt8]?; var high: [UInt8]?; var parent: Int? }
        var pending = [Visit(number: record.root, level: 1, low: nil, high: nil, parent: nil)]
        while let visit = pending.popLast() {
            let number = visit.number
            guard number >= 2, number <= meta.lastPage else {
                let whose = visit.parent.map { "page \($0) names child page \(number)" } ?? "the root page \(number)"
                issue(table, visit.parent, "\(whose), outside the file's pages 2…\(meta.lastPage)")
                continue
            }
            guard owner[number] == 0 else {
                issue(table, number, "reached twice (it is also \(ownerName(owner[number])))")
                continue
            }
            owner[number] = tag
            guard read(number) else {
                issue(table, number, "cannot be read (the file ends before it)")
                continue
            }
            let problem = checkPage(number, level: visit.level, depth: record.depth, isFreeList: isFreeList)
            if let problem { issue(table, number, problem); continue }
            let flags = word(10, UInt16.self), lower = word(12, UInt16.self)
            let count = (lower - DataFile.pageHeader) / 2
            let isBranch = flags & Self.branch != 0
            if isBranch { stats.branchPages += 1 } else { stats.leafPages += 1 }
            // Nodes: checked in order; keys ascend, and stay within the bounds from above.
            var previous: (at: Int, size: Int)? = nil
            var children: [Visit] = []
            var bad: String? = nil
            /// In a leaf, keys out of order are noted (once a page) and the rest of its layout still checked.
            var misordered: String? = nil
            for i in 0..<count {
                let node = word(DataFile.pageHeader + 2 * i, UInt16.self)
                let lo = word(node, UInt16.self), hi = word(node + 2, UInt16.self)
                let nodeFlags = word(node + 4, UInt16.self), keySize = word(node + 6, UInt16.self)
                let keyAt = node + Self.nodeHeader
                guard keyAt + keySize <= pageSize else { bad = "node \(i)'s key (\(keySize) bytes at \(keyAt)) runs past the page"; break }
                let key = (keyAt, keySize)
                if !(isBranch && i == 0), misordered == nil {  // a branch page's first key is not used
                    var order: String? = nil
                    if let p = previous, compareKeys(p, key, integer: integer) >= 0 { order = "node \(i)'s key is not above node \(i - 1)'s: keys out of order" }
                    else if let low = visit.low, compare(low, key, integer: integer) > 0 { order = "node \(i)'s key is below the branch key that leads here (page \(visit.parent ?? -1))" }
                    else if let high = visit.high, compare(high, key, integer: integer) <= 0 { order = "node \(i)'s key is not below the next branch key of page \(visit.parent ?? -1)" }
                    if let order {
                        // A branch key out of order misroutes every lookup below it: the walk stops there.
                        if isBranch { bad = order; break }
                        misordered = order
                    }
                    previous = key
                }
                if isBranch {
                    let child = lo | hi << 16 | nodeFlags << 32
                    children.append(Visit(number: child, level: visit.level + 1, low: i == 0 ? visit.low : bytes(key), high: nil, parent: number))
                    continue
                }
                stats.entries += 1
                if nodeFlags & Self.dupData != 0 { bad = "node \(i) holds sorted duplicates, which topicstore never writes"; break }
                if nodeFlags & Self.subData != 0 && isFreeList { bad = "node \(i) is a table record, which the free list never holds"; break }
                let valueSize = lo | hi << 16, valueAt = keyAt + keySize
                var value: [UInt8]? = nil
                if nodeFlags & Self.bigData != 0 {
                    guard valueAt + 8 <= pageSize else { bad = "node \(i)'s overflow page number runs past the page"; break }
                    let first = word(valueAt, UInt64.self)
                    let needed = (DataFile.pageHeader - 1 + valueSize) / pageSize + 1
                    let pages: Int
                    switch claimOverflow(first, needing: needed, tag: tag, from: number) {
                    case .failure(let problem):
                        issue(table, number, "node \(i): \(problem.message)")
                        continue
                    case .success(let run): pages = run
                    }
                    stats.overflowPages += pages
                    if isFreeList || nodeFlags & Self.subData != 0 {
                        value = read(at: first * pageSize + DataFile.pageHeader, count: valueSize)
                    }
                } else {
                    guard valueAt + valueSize <= pageSize else { bad = "node \(i)'s value (\(valueSize) bytes at \(valueAt)) runs past the page"; break }
                    if isFreeList || nodeFlags & Self.subData != 0 { value = Array(page[valueAt..<valueAt + valueSize]) }
                }
                if nodeFlags & Self.subData != 0 {
                    guard let value, value.count == Self.recordSize else { bad = "node \(i) is a table record of \(valueSize) bytes, not \(Self.recordSize)"; break }
                    let name = String(decoding: page[keyAt..<keyAt + keySize], as: UTF8.self)
                    named.append((name, value.withUnsafeBytes { Record($0) }))
                } else if isFreeList, let value {
                    freeLists.append((value, number, i))
                }
            }
            if let misordered { issue(table, number, misordered, kind: .keyOrder) }
            if let bad { issue(table, number, bad); continue }
            // Children pushed in reverse so the walk goes left to right; each one's
            // upper bound is the next branch key.
            for j in stride(from: children.count - 1, through: 0, by: -1) {
                var child = children[j]
                child.high = j + 1 < children.count ? children[j + 1].low : visit.high
                pending.append(child)
            }
        }
        if stats.branchPages != record.branchPages || stats.leafPages != record.leafPages
            || stats.overflowPages != record.overflowPages || stats.entries != record.entries {
            issue(table, record.root, "its record counts \(record.branchPages) branch, \(record.leafPages) leaf and \(record.overflowPages) overflow pages"
                  + " and \(record.entries) entries; its tree has \(stats.branchPages), \(stats.leafPages), \(stats.overflowPages) and \(stats.entries)",
                  kind: .counts)
        }
    }

    /// What is wrong with the page just read as a page of `level` in a tree of `depth`, or nil.
    private func checkPage(_ number: Int, level: Int, depth: Int, isFreeList: Bool) -> String? {
        let stored = word(0, UInt64.self)
        guard stored == number else { return "its header says it is page \(stored)" }
        let flags = word(10, UInt16.self)
        let kind = flags & (Self.branch | Self.leaf | Self.overflow | Self.metaPage | Self.leaf2 | Self.subPage)
        let expected = level < depth ? Self.branch : Self.leaf
        guard kind == expected else {
            let what = level < depth ? "a branch page (level \(level) of \(depth))" : "a leaf page (level \(level) of \(depth))"
            return "should be \(what), its flags are \(String(flags, radix: 16))"
        }
        let lower = word(12, UInt16.self), upper = word(14, UInt16.self)
        guard lower >= DataFile.pageHeader + 2, lower <= upper, upper <= pageSize, (lower - DataFile.pageHeader) % 2 == 0 else {
            return "its node area is \(lower)…\(upper), not inside the page with at least one node"
        }
        let count = (lower - DataFile.pageHeader) / 2
        if kind == Self.branch && count < 1 { return "a branch page without children" }
        // LMDB asserts that a branch page of any tree but the free list has two
        // children (`mdb_page_search_root`): a lookup through one stops the process.
        if kind == Self.branch && count < 2 && !isFreeList { return "a branch page with one child, which LMDB refuses to read" }
        for i in 0..<count {
            let node = word(DataFile.pageHeader + 2 * i, UInt16.self)
            guard node >= upper, node + Self.nodeHeader <= pageSize else {
                return "node \(i) is at \(node), outside the node area \(upper)…\(pageSize)"
            }
        }
        return nil
    }

    struct OverflowProblem: Error { var message: String }

    /// Marks an overflow run as the node's and returns its length, or what is wrong with it.
    /// A run may be longer than its value needs: LMDB overwrites a value on overflow pages
    /// written in the same transaction in place, even with a smaller one, and keeps the run
    /// ("we don't bother to try shrinking the page", mdb.c), its node still marked as
    /// holding its value there. Shorter than needed, the value would run past it.
    private mutating func claimOverflow(_ first: Int, needing needed: Int, tag: UInt16, from node: Int) -> Result<Int, OverflowProblem> {
        func problem(_ m: String) -> Result<Int, OverflowProblem> { .failure(OverflowProblem(message: m)) }
        guard first >= 2, needed >= 1, first <= meta.lastPage - needed + 1 else {
            return problem("its value's \(needed) overflow page(s) from page \(first) are outside the file's pages 2…\(meta.lastPage)")
        }
        guard let header = read(at: first * pageSize, count: DataFile.pageHeader) else {
            return problem("its overflow page \(first) cannot be read")
        }
        let stored = DataFile.word(header, 0, UInt64.self), flags = DataFile.word(header, 10, UInt16.self)
        let count = DataFile.word(header, 12, UInt32.self)
        guard stored == first, flags & Self.overflow != 0, count >= needed, first <= meta.lastPage - count + 1 else {
            return problem("its overflow page \(first) says page \(stored), flags \(String(flags, radix: 16)), \(count) page(s); expected \(needed)\(count > needed ? " or more within the file" : "")")
        }
        for p in first..<first + count where owner[p] != 0 {
            return problem("its overflow page \(p) is also \(ownerName(owner[p]))")
        }
        for p in first..<first + count { owner[p] = tag }
        return .success(count)
    }

    /// One free-list record: a count, then that many page numbers, each free once and in no tree.
    private mutating func freeList(_ value: [UInt8], from number: Int, node: Int) {
        guard value.count >= 8 else { issue("(free list)", number, "node \(node) holds \(value.count) bytes, not a page list"); return }
        let count = DataFile.word(value, 0, UInt64.self)
        guard count >= 0, count <= (value.count - 8) / 8 else {
            issue("(free list)", number, "node \(node) lists \(count) pages in \(value.count) bytes")
            return
        }
        for j in stride(from: 1, through: count, by: 1) {
            let p = DataFile.word(value, 8 * j, UInt64.self)
            guard p >= 2, p <= meta.lastPage else { issue("(free list)", number, "node \(node) lists page \(p), outside 2…\(meta.lastPage)"); continue }
            guard owner[p] == 0 else { issue("(free list)", number, "node \(node) lists page \(p) as free; it is \(ownerName(owner[p]))"); continue }
            owner[p] = Self.freeOwner
            freePages += 1
        }
    }

    private func ownerName(_ tag: UInt16) -> String {
        if tag == Self.freeOwner { return "on the free list" }
        let index = Int(tag) - 1
        return index >= 0 && index < names.count ? "a page of \(names[index])" : "taken"
    }

    private func ownerTable(_ tag: UInt16) -> String {
        let index = Int(tag) - 1
        return index >= 0 && index < names.count ? names[index] : "(table \(tag))"
    }

    /// Copies page `number` into `buffer` (the current page); false when the
    /// file ends before it. From the map a page costs no system call (pread was half
    /// of a 10M-device store's walk, 2.2 of 4.6 s, in the kernel). It is still copied:
    /// one streaming copy fetches it faster than the walk's scattered reads of the
    /// map did (4.1 s of user time against 3.1 s with the copy).
    private mutating func read(_ number: Int) -> Bool {
        let size = pageSize, offset = number * size
        if let file {
            guard offset + size <= file.count else { return false }
            buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: file[offset..<offset + size]))
            return true
        }
        return pread(fd, buffer.baseAddress, size, off_t(offset)) == size
    }

    /// Bytes `offset..<offset+count` of the file, or nil when it ends before them.
    private func read(at offset: Int, count: Int) -> [UInt8]? {
        guard let file else { return DataFile.read(fd, at: offset, count: count) }
        guard count >= 0, offset >= 0, offset + count <= file.count else { return nil }
        return Array(file[offset..<offset + count])
    }

    private func word<T: FixedWidthInteger>(_ offset: Int, _: T.Type) -> Int {
        Int(truncatingIfNeeded: T(littleEndian: page.loadUnaligned(fromByteOffset: offset, as: T.self)))
    }

    private func bytes(_ key: (Int, Int)) -> [UInt8] { Array(page[key.0..<key.0 + key.1]) }

    private func key(_ key: (Int, Int)) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: page[key.0..<key.0 + key.1])
    }

    private func compareKeys(_ a: (Int, Int), _ b: (Int, Int), integer: Bool) -> Int {
        compare(key(a), key(b), integer: integer)
    }

    private func compare(_ a: [UInt8], _ b: (Int, Int), integer: Bool) -> Int {
        a.withUnsafeBytes { compare($0, key(b), integer: integer) }
    }
}
