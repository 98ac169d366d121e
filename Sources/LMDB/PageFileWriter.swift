import Dispatch
import Foundation
import Glibc

/// Writes a new LMDB data file (data.mdb) from tables whose entries are given
/// in key order, laying out LMDB's pages itself instead of putting each entry
/// through LMDB.
///
/// A rebuild writes millions of entries into an empty store; through
/// `mdb_cursor_put` with `MDB_APPEND`, two thirds of that time went to LMDB's
/// own work per put (a cursor search, a page touch, a split when the page is
/// full). Here an entry is copied into the leaf being filled, and each page is
/// written once, in page-number order, when it is full.
///
/// The file is what LMDB 0.9 itself would write for the same appends: pages
/// filled as `MDB_APPEND` fills them (a leaf takes entries until the next one
/// does not fit), branch pages whose first key is empty (LMDB never reads it),
/// values too large for a node (`LEAFSIZE > nodemax`) on overflow pages, each
/// table's record (`MDB_db`) in the main table, no free pages. Meta page 0 holds
/// transaction 0 (an empty environment), meta page 1 transaction 1 (the tables):
/// the next write transaction of LMDB is 2, into page 0, as after any first commit.
/// `Environment.checkStructure` walks the result like any other file.
///
/// Keys must be given in ascending order (LMDB's byte order, which topicstore's
/// `topicstore_key_order` computes faster; for a table of `MDB_INTEGERKEY` flags,
/// ascending integers): the writer does not compare them. Tables are given one
/// after the other, each once; `finish()` writes the main table, the meta pages,
/// and syncs. Leaves and overflow pages are those LMDB's appends make; branch
/// pages, laid out when a table ends, come out a little fuller, each naming at
/// least two children (LMDB asserts it).
public final class PageFileWriter {
    /// What the file holds.
    public struct Report: Sendable {
        public var entries = 0
        public var pages = 0
        public var fileBytes = 0
    }

    // mdb.c: page header size, page and node flags, the table flags kept on the free list's record.
    private static let header = 16, nodeHeader = 8
    private static let branchFlag: UInt16 = 0x01, leafFlag: UInt16 = 0x02, overflowFlag: UInt16 = 0x04, metaFlag: UInt16 = 0x08
    private static let bigData: UInt16 = 0x01, subData: UInt16 = 0x02
    private static let integerKey: UInt16 = 0x08
    private static let noPage = UInt64.max
    /// Linux's `O_DIRECT` (Swift's Glibc module leaves it out: it is behind `_GNU_SOURCE`).
    #if arch(arm64)
    private static let oDirect: Int32 = 0o200000
    #else
    private static let oDirect: Int32 = 0o40000
    #endif

    private let fd: Int32
    public let pageSize: Int
    /// LMDB's largest node on a leaf (`me_nodemax`); a larger one keeps its value on overflow pages.
    private let nodeMax: Int

    /// Finished pages not yet written: pages `bufferFirst ..< bufferFirst + buffered`,
    /// gathered in one of two buffers while the other is written on another thread
    /// (`io`). Written from the main thread, the copy into the page cache took 3 s
    /// of a 10M-device rebuild's write-out (a 2.8 GB file), while the other core
    /// sat idle for the last 4 s of it.
    private let buffers: [UnsafeMutableRawPointer]
    private var current = 0
    /// Signalled when a buffer's write is done; the one being filled is held.
    private let free = [DispatchSemaphore(value: 0), DispatchSemaphore(value: 0)]
    private let io = DispatchQueue(label: "page-file-write")
    private let ioFailure = IOFailure()
    private static let bufferPages = 1024
    private var bufferFirst = 2
    private var buffered = 0
    private var buffer: UnsafeMutableRawPointer { buffers[current] }

    /// The first error of a write on the `io` thread (an errno), thrown by the next flush.
    private final class IOFailure: @unchecked Sendable {
        private let lock = NSLock()
        private var code: Int32 = 0
        func note(_ e: Int32) { lock.withLock { if code == 0 { code = e } } }
        var error: Int32 { lock.withLock { code } }
    }

    /// A buffer's pages, handed to the `io` thread.
    private struct Job: @unchecked Sendable {
        let fd: Int32, bytes: UnsafeRawBufferPointer, offset: Int
    }
    /// The next page number to give out (0 and 1 are the meta pages).
    private var nextPage = 2

    /// The leaf being filled, behind a pointer: as a property of the class, each
    /// entry's append paid dynamic exclusivity checks, as much as the copying itself.
    private struct Leaf {
        var page: UnsafeMutableRawPointer
        var lower = 0, upper = 0, count = 0
    }
    private let leaf: UnsafeMutablePointer<Leaf>
    /// The written leaves of the current table, each its first key (in `firstKeys`,
    /// from `keyStarts[i]` to the next start) and its page: the branch levels above
    /// them are laid out when the table ends (`closeTree`), so that every branch
    /// page gets at least two children, as LMDB asserts when it reads one.
    private var firstKeys: [UInt8] = []
    private var keyStarts: [Int] = []
    private var children: [UInt64] = []
    private var table: (name: String, flags: UInt16)?
    /// The current tree's entries, and the file's (behind a pointer, as `leaf`).
    private let counts: UnsafeMutablePointer<(tree: Int, file: Int)>
    private var entries: Int { counts.pointee.tree }
    private var branchPages = 0, leafPages = 0, overflowPages = 0
    /// The finished tables' records (`MDB_db`), by name.
    private var records: [(name: [UInt8], record: [UInt8])] = []
    private var finished = false

    /// Creates (or truncates) the file at `path`, mode `mode`.
    ///
    /// With `bypassingPageCache`, pages go from the writer's buffers to the disk
    /// (`O_DIRECT`) instead of being copied into the page cache and written back
    /// by the final sync. On bench's 1M store that copy was 0.38 s of CPU in a
    /// rebuild's 0.8 s write-out, with both cores busy, and the sync then waited
    /// 0.12 s for 262 MB. The file's pages are then not cached: a file that is
    /// read at once and all over (a compacted store a server turns to) is better
    /// written without it. Where the filesystem refuses direct writes, the
    /// writes are buffered.
    public init(path: String, pageSize: Int = Int(sysconf(Int32(_SC_PAGESIZE))), mode: UInt32 = 0o644,
                bypassingPageCache: Bool = false) throws {
        precondition(pageSize >= 512 && pageSize <= 32768 && pageSize & (pageSize - 1) == 0, "an LMDB page size")
        let flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC
        // (Pages, buffers and offsets are aligned to 4096 bytes, as direct writes want.)
        var fd: Int32 = -1
        if bypassingPageCache && pageSize % 4096 == 0 { fd = open(path, flags | Self.oDirect, mode) }
        if fd < 0 { fd = open(path, flags, mode) }
        guard fd >= 0 else { throw LMDBError(rawValue: errno) }
        self.fd = fd
        self.pageSize = pageSize
        nodeMax = (((pageSize - Self.header) / 2) & ~1) - 2
        buffers = (0..<2).map { _ in UnsafeMutableRawPointer.allocate(byteCount: Self.bufferPages * pageSize, alignment: 4096) }
        free[1].signal()
        leaf = .allocate(capacity: 1)
        let page = UnsafeMutableRawPointer.allocate(byteCount: pageSize, alignment: 16)
        page.initializeMemory(as: UInt8.self, repeating: 0, count: pageSize)
        leaf.initialize(to: Leaf(page: page, lower: Self.header, upper: pageSize))
        counts = .allocate(capacity: 1)
        counts.initialize(to: (0, 0))
    }

    deinit {
        io.sync {}  // a write still running reads a buffer
        for b in buffers { b.deallocate() }
        leaf.pointee.page.deallocate()
        leaf.deinitialize(count: 1)
        leaf.deallocate()
        counts.deallocate()
        if !finished { close(fd) }
    }

    /// Starts the table `name` with LMDB's persistent flags `flags` (`MDB_INTEGERKEY`, …).
    public func beginTable(_ name: String, flags: UInt32 = 0) {
        precondition(table == nil && !finished, "one table at a time, before finish()")
        precondition(!records.contains { $0.name.elementsEqual(name.utf8) }, "a table is given once")
        table = (name, UInt16(truncatingIfNeeded: flags))
        counts.pointee.tree = 0; branchPages = 0; leafPages = 0; overflowPages = 0
    }

    /// Appends an entry of the current table: its key above the last one's.
    public func append(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws {
        assert(table != nil, "append outside a table")  // (not checked per entry in release builds)
        try add(key, value, nodeFlags: 0)
    }

    /// Ends the current table: its last pages are written and its record kept for the main table.
    public func endTable() throws {
        guard let table else { preconditionFailure("endTable without beginTable") }
        let record = try closeTree(flags: table.flags)
        records.append((Array(table.name.utf8), record))
        self.table = nil
    }

    /// Writes the main table (each table's record), the two meta pages, and syncs
    /// the file; `mapSize` is the map the meta pages propose (at least the file).
    @discardableResult
    public func finish(mapSize: Int = 0, sync: Bool = true) throws -> Report {
        precondition(table == nil && !finished, "finish once, after the last table")
        // The main table: one entry per table, its name the key (memcmp order), its record the value.
        counts.pointee.tree = 0; branchPages = 0; leafPages = 0; overflowPages = 0
        for (name, record) in records.sorted(by: { $0.name.lexicographicallyPrecedes($1.name) }) {
            try name.withUnsafeBytes { k in try record.withUnsafeBytes { v in try add(k, v, nodeFlags: Self.subData) } }
        }
        let main = try closeTree(flags: 0)
        try flushBuffer()
        io.sync {}
        if ioFailure.error != 0 { throw LMDBError(rawValue: ioFailure.error) }
        let lastPage = nextPage - 1
        let map = max(mapSize, (lastPage + 1) * pageSize)
        let emptyMain = Self.record(flags: 0, depth: 0, branch: 0, leaf: 0, overflow: 0, entries: 0, root: Self.noPage)
        try writeMeta(page: 0, main: emptyMain, lastPage: 1, transaction: 0, mapSize: map)
        try writeMeta(page: 1, main: main, lastPage: lastPage, transaction: 1, mapSize: map)
        if sync, fsync(fd) != 0 { throw LMDBError(rawValue: errno) }
        finished = true
        guard close(fd) == 0 else { throw LMDBError(rawValue: errno) }
        return Report(entries: counts.pointee.file, pages: lastPage + 1, fileBytes: (lastPage + 1) * pageSize)
    }

    // MARK: Nodes and pages

    @inline(__always)
    private static func even(_ n: Int) -> Int { (n + 1) & ~1 }

    private func add(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, nodeFlags: UInt16) throws {
        // LMDB's own limits (`mdb_env_get_maxkeysize`; a node's 32-bit value size), refused as `mdb_put` refuses them.
        guard key.count > 0 && key.count <= 511, value.count <= Int(UInt32.max) else { throw LMDBError.badValueSize }
        var flags = nodeFlags
        var overflowFirst: UInt64 = 0
        if Self.nodeHeader + key.count + value.count > nodeMax {
            overflowFirst = try writeOverflow(value)
            flags |= Self.bigData
        }
        let stored = flags & Self.bigData != 0 ? 8 : value.count
        let size = Self.even(Self.nodeHeader + key.count + stored)
        if leaf.pointee.upper - leaf.pointee.lower < size + 2 { try writeLeaf() }
        let page = leaf.pointee.page
        let at = leaf.pointee.upper - size
        page.storeBytes(of: UInt16(at).littleEndian, toByteOffset: leaf.pointee.lower, as: UInt16.self)
        leaf.pointee.lower += 2
        leaf.pointee.upper = at
        leaf.pointee.count += 1
        let node = page + at
        node.storeBytes(of: UInt16(truncatingIfNeeded: value.count).littleEndian, as: UInt16.self)
        node.storeBytes(of: UInt16(truncatingIfNeeded: value.count >> 16).littleEndian, toByteOffset: 2, as: UInt16.self)
        node.storeBytes(of: flags.littleEndian, toByteOffset: 4, as: UInt16.self)
        node.storeBytes(of: UInt16(key.count).littleEndian, toByteOffset: 6, as: UInt16.self)
        (node + Self.nodeHeader).copyMemory(from: key.baseAddress!, byteCount: key.count)
        if flags & Self.bigData != 0 {
            (node + Self.nodeHeader + key.count).storeBytes(of: overflowFirst.littleEndian, as: UInt64.self)
        } else if value.count > 0 {
            (node + Self.nodeHeader + key.count).copyMemory(from: value.baseAddress!, byteCount: value.count)
        }
        counts.pointee.tree += 1
        counts.pointee.file += 1
    }

    /// Writes the leaf being filled under the next page number, notes its first
    /// key for the branch levels, and starts an empty leaf.
    private func writeLeaf() throws {
        let page = leaf.pointee.page
        let number = UInt64(nextPage)
        nextPage += 1
        page.storeBytes(of: number.littleEndian, as: UInt64.self)
        page.storeBytes(of: Self.leafFlag.littleEndian, toByteOffset: 10, as: UInt16.self)
        page.storeBytes(of: UInt16(leaf.pointee.lower).littleEndian, toByteOffset: 12, as: UInt16.self)
        page.storeBytes(of: UInt16(leaf.pointee.upper).littleEndian, toByteOffset: 14, as: UInt16.self)
        try emit(UnsafeRawBufferPointer(start: page, count: pageSize))
        leafPages += 1
        let first = Int(UInt16(littleEndian: page.load(fromByteOffset: Self.header, as: UInt16.self)))
        let keyCount = Int(UInt16(littleEndian: page.load(fromByteOffset: first + 6, as: UInt16.self)))
        keyStarts.append(firstKeys.count)
        firstKeys.append(contentsOf: UnsafeRawBufferPointer(start: page + first + Self.nodeHeader, count: keyCount))
        children.append(number)
        page.initializeMemory(as: UInt8.self, repeating: 0, count: pageSize)
        leaf.pointee.lower = Self.header
        leaf.pointee.upper = pageSize
        leaf.pointee.count = 0
    }

    /// Writes the last leaf of the current tree and the branch levels above its
    /// leaves, bottom up, and returns its record.
    private func closeTree(flags: UInt16) throws -> [UInt8] {
        defer { firstKeys = []; keyStarts = []; children = [] }
        guard entries > 0 else {
            return Self.record(flags: flags, depth: 0, branch: 0, leaf: 0, overflow: 0, entries: 0, root: Self.noPage)
        }
        try writeLeaf()
        // Each level: the pages below it, each by its first key (a range of
        // `firstKeys`) and its number; the level's own pages name the level above.
        var level = zip(keyStarts.indices, children).map { i, child in
            (start: keyStarts[i], end: i + 1 < keyStarts.count ? keyStarts[i + 1] : firstKeys.count, child: child)
        }
        var depth = 1
        while level.count > 1 {
            level = try writeBranchLevel(level)
            depth += 1
        }
        return Self.record(flags: flags, depth: depth, branch: branchPages, leaf: leafPages, overflow: overflowPages,
                           entries: entries, root: level[0].child)
    }

    private typealias Child = (start: Int, end: Int, child: UInt64)

    /// Lays out branch pages naming `below` in order, each as full as it goes,
    /// and returns them as the next level's children. A last page that would
    /// name one child takes the previous page's last: LMDB asserts that a branch
    /// page has two (`mdb_page_search_root`), and its appends never leave one.
    private func writeBranchLevel(_ below: [Child]) throws -> [Child] {
        // A node: its header and key (none for a page's first), and its pointer.
        func size(_ c: Child, first: Bool) -> Int { Self.even(Self.nodeHeader + (first ? 0 : c.end - c.start)) + 2 }
        var pages: [Range<Int>] = []
        var start = 0, used = 0
        for i in below.indices {
            let first = i == start
            if !first, used + size(below[i], first: false) > pageSize - Self.header {
                pages.append(start..<i)
                start = i
                used = size(below[i], first: true)
            } else {
                used += size(below[i], first: first)
            }
        }
        pages.append(start..<below.count)
        if pages.count > 1, pages[pages.count - 1].count == 1 {
            let last = pages.count - 1
            precondition(pages[last - 1].count >= 3, "a full branch page of two children")
            pages[last - 1] = pages[last - 1].lowerBound..<pages[last - 1].upperBound - 1
            pages[last] = pages[last].lowerBound - 1..<pages[last].upperBound
        }
        var above: [Child] = []
        above.reserveCapacity(pages.count)
        let page = UnsafeMutableRawPointer.allocate(byteCount: pageSize, alignment: 16)
        defer { page.deallocate() }
        try firstKeys.withUnsafeBytes { keys in
            for range in pages {
                page.initializeMemory(as: UInt8.self, repeating: 0, count: pageSize)
                var lower = Self.header, upper = pageSize
                for i in range {
                    let c = below[i]
                    let keyCount = i == range.lowerBound ? 0 : c.end - c.start
                    upper -= Self.even(Self.nodeHeader + keyCount)
                    page.storeBytes(of: UInt16(upper).littleEndian, toByteOffset: lower, as: UInt16.self)
                    lower += 2
                    let node = page + upper
                    node.storeBytes(of: UInt16(truncatingIfNeeded: c.child).littleEndian, as: UInt16.self)
                    node.storeBytes(of: UInt16(truncatingIfNeeded: c.child >> 16).littleEndian, toByteOffset: 2, as: UInt16.self)
                    node.storeBytes(of: UInt16(truncatingIfNeeded: c.child >> 32).littleEndian, toByteOffset: 4, as: UInt16.self)
                    node.storeBytes(of: UInt16(keyCount).littleEndian, toByteOffset: 6, as: UInt16.self)
                    if keyCount > 0 { (node + Self.nodeHeader).copyMemory(from: keys.baseAddress! + c.start, byteCount: keyCount) }
                }
                precondition(lower <= upper, "a branch page's nodes overlap")
                let number = UInt64(nextPage)
                nextPage += 1
                page.storeBytes(of: number.littleEndian, as: UInt64.self)
                page.storeBytes(of: Self.branchFlag.littleEndian, toByteOffset: 10, as: UInt16.self)
                page.storeBytes(of: UInt16(lower).littleEndian, toByteOffset: 12, as: UInt16.self)
                page.storeBytes(of: UInt16(upper).littleEndian, toByteOffset: 14, as: UInt16.self)
                try emit(UnsafeRawBufferPointer(start: page, count: pageSize))
                branchPages += 1
                let first = below[range.lowerBound]
                above.append((first.start, first.end, number))
            }
        }
        return above
    }

    /// Writes `value` on overflow pages and returns the first one's number.
    private func writeOverflow(_ value: UnsafeRawBufferPointer) throws -> UInt64 {
        let count = (Self.header - 1 + value.count) / pageSize + 1
        let first = nextPage
        let run = UnsafeMutableRawPointer.allocate(byteCount: count * pageSize, alignment: 4096)
        defer { run.deallocate() }
        run.initializeMemory(as: UInt8.self, repeating: 0, count: count * pageSize)
        run.storeBytes(of: UInt64(first).littleEndian, as: UInt64.self)
        run.storeBytes(of: Self.overflowFlag.littleEndian, toByteOffset: 10, as: UInt16.self)
        run.storeBytes(of: UInt32(count).littleEndian, toByteOffset: 12, as: UInt32.self)
        if value.count > 0 { (run + Self.header).copyMemory(from: value.baseAddress!, byteCount: value.count) }
        nextPage += count
        overflowPages += count
        try emit(UnsafeRawBufferPointer(start: run, count: count * pageSize))
        return UInt64(first)
    }

    /// Queues whole pages, the next in page-number order.
    private func emit(_ pages: UnsafeRawBufferPointer) throws {
        let count = pages.count / pageSize
        if buffered + count > Self.bufferPages { try flushBuffer() }
        if count > Self.bufferPages {
            try writeAll(pages, at: bufferFirst * pageSize)
            bufferFirst += count
            return
        }
        (buffer + buffered * pageSize).copyMemory(from: pages.baseAddress!, byteCount: pages.count)
        buffered += count
    }

    /// Hands the buffer's pages to the `io` thread and goes on in the other
    /// buffer once its last write is done.
    private func flushBuffer() throws {
        guard buffered > 0 else { return }
        if ioFailure.error != 0 { throw LMDBError(rawValue: ioFailure.error) }
        let job = Job(fd: fd, bytes: UnsafeRawBufferPointer(start: buffer, count: buffered * pageSize), offset: bufferFirst * pageSize)
        let done = free[current], failure = ioFailure
        io.async {
            let e = Self.writeAll(job.fd, job.bytes, at: job.offset)
            if e != 0 { failure.note(e) }
            done.signal()
        }
        bufferFirst += buffered
        buffered = 0
        current ^= 1
        free[current].wait()
    }

    private func writeAll(_ bytes: UnsafeRawBufferPointer, at offset: Int) throws {
        let e = Self.writeAll(fd, bytes, at: offset)
        if e != 0 { throw LMDBError(rawValue: e) }
    }

    /// Writes all of `bytes` at `offset`; 0 or the errno of the write that failed.
    private static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int) -> Int32 {
        var done = 0
        while done < bytes.count {
            let n = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset + done))
            if n < 0 {
                if errno == EINTR { continue }
                // A direct write that fails (a filesystem or device with an alignment,
                // or no support, of its own: EINVAL, EOPNOTSUPP, …): the file's writes are
                // buffered from then on, and this one tried again. An error of the
                // disk itself (ENOSPC, EIO) comes back from the buffered write.
                if fcntl(fd, F_GETFL) & Self.oDirect != 0 {
                    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~Self.oDirect)
                    continue
                }
                return errno
            }
            if n == 0 { return EIO }  // (a regular file writes something or fails; never loop)
            done += n
        }
        return 0
    }

    /// A table record (`MDB_db`, 48 bytes): pad, flags, depth, page counts, entries, root.
    private static func record(flags: UInt16, depth: Int, branch: Int, leaf: Int, overflow: Int, entries: Int, root: UInt64,
                               pad: UInt32 = 0) -> [UInt8] {
        var r = [UInt8](repeating: 0, count: 48)
        r.withUnsafeMutableBytes { b in
            b.storeBytes(of: pad.littleEndian, as: UInt32.self)
            b.storeBytes(of: flags.littleEndian, toByteOffset: 4, as: UInt16.self)
            b.storeBytes(of: UInt16(depth).littleEndian, toByteOffset: 6, as: UInt16.self)
            b.storeBytes(of: UInt64(branch).littleEndian, toByteOffset: 8, as: UInt64.self)
            b.storeBytes(of: UInt64(leaf).littleEndian, toByteOffset: 16, as: UInt64.self)
            b.storeBytes(of: UInt64(overflow).littleEndian, toByteOffset: 24, as: UInt64.self)
            b.storeBytes(of: UInt64(entries).littleEndian, toByteOffset: 32, as: UInt64.self)
            b.storeBytes(of: root.littleEndian, toByteOffset: 40, as: UInt64.self)
        }
        return r
    }

    /// A meta page (`MDB_meta` after the page header): magic, version 1, no fixed
    /// address, the map size, the free list's record (an empty tree whose pad is the
    /// page size and whose flags are `MDB_INTEGERKEY`), the main table's, the last
    /// page and the transaction.
    private func writeMeta(page: Int, main: [UInt8], lastPage: Int, transaction: Int, mapSize: Int) throws {
        let b = UnsafeMutableRawBufferPointer.allocate(byteCount: pageSize, alignment: 4096)
        defer { b.deallocate() }
        b.initializeMemory(as: UInt8.self, repeating: 0)
        let free = Self.record(flags: Self.integerKey, depth: 0, branch: 0, leaf: 0, overflow: 0, entries: 0, root: Self.noPage,
                               pad: UInt32(pageSize))
        b.storeBytes(of: UInt64(page).littleEndian, as: UInt64.self)
        b.storeBytes(of: Self.metaFlag.littleEndian, toByteOffset: 10, as: UInt16.self)
        let m = Self.header
        b.storeBytes(of: UInt32(0xBEEF_C0DE).littleEndian, toByteOffset: m, as: UInt32.self)
        b.storeBytes(of: UInt32(1).littleEndian, toByteOffset: m + 4, as: UInt32.self)
        b.storeBytes(of: UInt64(mapSize).littleEndian, toByteOffset: m + 16, as: UInt64.self)
        for i in 0..<48 { b[m + 24 + i] = free[i]; b[m + 72 + i] = main[i] }
        b.storeBytes(of: UInt64(lastPage).littleEndian, toByteOffset: m + 120, as: UInt64.self)
        b.storeBytes(of: UInt64(transaction).littleEndian, toByteOffset: m + 128, as: UInt64.self)
        try writeAll(UnsafeRawBufferPointer(b), at: page * pageSize)
    }
}
