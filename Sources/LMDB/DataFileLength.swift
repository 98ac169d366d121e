internal import CLMDB
import Foundation

/// A data.mdb of 0 bytes. LMDB takes an empty file for a new environment (a
/// writer would write fresh meta pages into it), but an existing empty data.mdb
/// is a store cut to nothing, or one whose creation died before its first write:
/// the environment refuses it and leaves it as it is.
public struct EmptyDataFile: Error, Sendable, CustomStringConvertible {
    /// The file (`DIR/data.mdb`).
    public let file: String
    public var description: String { "\(file) is empty (0 bytes)" }
}

/// A data.mdb that ends before pages its newest meta page says hold data: a copy
/// that stopped early, a disk that filled. LMDB reads the meta pages with read()
/// when it opens a file and maps the rest, so the first read of a page past the
/// end of the file would kill the process (SIGBUS); the environment refuses the
/// file at open, before any page is read through the map, and leaves it as it is.
/// (A file cut while a process has it open is not caught: that process maps it already.)
public struct TruncatedDataFile: Error, Sendable, CustomStringConvertible {
    /// The file (`DIR/data.mdb`).
    public let file: String
    /// Its size in bytes.
    public let size: Int
    /// What its newest meta page says the store's pages take: (last page + 1) × page size.
    public let needed: Int
    public let pageSize: Int
    /// The transaction of that meta page.
    public let transactionID: Int

    public var description: String {
        let metaPages = size < 2 * pageSize ? " (less than LMDB's two meta pages)" : ""
        let first = size / pageSize, last = needed / pageSize - 1
        let missing = first == last ? "page \(last) is missing and is not free" : "pages \(first)…\(last) are missing, not all of them free"
        return "\(file) is truncated: it holds \(size) bytes\(metaPages), but its meta page (transaction \(transactionID)) says the store's pages"
            + " take \(needed) bytes (pages 0…\(last) of \(pageSize) bytes); \(missing). Restore the store from a backup"
    }
}

/// A data.mdb whose newest meta page names a last page no file can reach: a
/// damaged meta page (a flipped bit in its page number), not a store LMDB can
/// read. LMDB would map that many pages, or a size wrapped round from it, and
/// arithmetic on the number traps; the environment refuses the file at open.
public struct DamagedMetaPage: Error, Sendable, CustomStringConvertible {
    /// The file (`DIR/data.mdb`).
    public let file: String
    /// Its size in bytes.
    public let size: Int
    /// The last page number the meta page holds.
    public let lastPage: UInt64
    public let pageSize: Int
    /// The meta page's transaction.
    public let transactionID: Int

    public var description: String {
        "\(file) is damaged: its meta page (transaction \(transactionID)) says the store's last page is \(lastPage), "
            + "more pages of \(pageSize) bytes than a file can hold (this one has \(size / max(pageSize, 1)) pages of \(size) bytes). "
            + "Restore the store from a backup"
    }
}

/// A data.mdb with one valid meta page and one that is not (a bad magic number,
/// version or page size): LMDB refuses the whole file as "not an LMDB file"
/// (MDB_INVALID), but it is one, damaged. The environment says so, and where.
public struct InvalidMetaPage: Error, Sendable, CustomStringConvertible {
    /// The file (`DIR/data.mdb`).
    public let file: String
    /// The page that is not a valid meta page (0 or 1), and its offset in the file.
    public let page: Int
    public let offset: Int
    /// The transaction the other, valid meta page holds.
    public let otherTransactionID: Int

    public var description: String {
        "\(file) is damaged: meta page \(page) (bytes \(offset)…) is not a valid LMDB meta page (magic, version or page size), "
            + "while meta page \(1 - page) is (transaction \(otherTransactionID)); LMDB refuses the file. Restore the store from a backup"
    }
}

extension Environment {
    /// The most bytes a store's pages may take: the address space LMDB maps them into
    /// (x86-64 and arm64 give a process 2^47 or 2^48 bytes). A meta page naming more is damaged.
    static let largestMap = 1 << 48

    /// Throws `TruncatedDataFile` unless data.mdb holds every page in use.
    ///
    /// A file at least `(last page + 1) × page size` long is whole. The size is taken
    /// after the meta page is read: a writer, in any process, extends the file (its
    /// pages written, or the map with `MDB_WRITEMAP`) before it writes the meta page
    /// that names them, and no writer shrinks it. `sizeBeforeOpen` is for a map this
    /// process opened with `MDB_WRITEMAP`, which LMDB extends to the map size at open.
    ///
    /// A shorter file may still be whole: LMDB does not write a page that a transaction
    /// took from the end of the file and freed again before it committed (it goes to the
    /// free list). So the pages past the end must all be free, which the free list of
    /// the newest snapshot says, read with pread: its own pages may be missing too.
    func checkDataFileLength(sizeBeforeOpen: Int?) throws {
        var fd: mdb_filehandle_t = -1
        guard mdb_env_get_fd(pointer, &fd) == 0, fd >= 0 else { return }
        func fileSize() -> Int {
            var st = stat()
            guard fstat(fd, &st) == 0 else { return .max }
            return min(Int(st.st_size), sizeBeforeOpen ?? .max)
        }
        let info = self.info()
        let (pages, wrapped) = info.lastPage.addingReportingOverflow(1)
        let (used, overflow) = pages.multipliedReportingOverflow(by: max(info.pageSize, 1))
        guard info.lastPage >= 0, !wrapped, !overflow, used <= Self.largestMap else {
            throw DamagedMetaPage(file: path + "/data.mdb", size: fileSize() == .max ? 0 : fileSize(), lastPage: UInt64(bitPattern: Int64(info.lastPage)),
                                  pageSize: info.pageSize, transactionID: info.lastTransactionID)
        }
        if fileSize() >= used { return }
        // A read transaction keeps the pages of its snapshot from being reused while they
        // are read; its meta page is the one with its transaction id (until two more commits
        // overwrite it: then again, with a newer snapshot).
        for _ in 0..<100 {
            let txn: Transaction
            do {
                txn = try Transaction(environment: self, readOnly: true)
            } catch LMDBError.mapResized {
                try setMapSize(0)  // another process grew the map; nothing else runs here yet
                continue
            }
            let snapshot = txn.id
            let metas = (0..<2).compactMap { DataFile.meta(fd, page: $0, pageSize: info.pageSize) }
            guard let meta = metas.first(where: { $0.transactionID == snapshot }) else { txn.abort(); continue }
            let size = fileSize()
            let needed = (meta.lastPage + 1) * meta.pageSize
            let whole = size >= needed
                || DataFile.areFree(pages: size / meta.pageSize...meta.lastPage, fd: fd, meta: meta, filePages: size / meta.pageSize)
            txn.abort()
            if whole { return }
            throw TruncatedDataFile(file: path + "/data.mdb", size: size, needed: needed,
                                    pageSize: meta.pageSize, transactionID: meta.transactionID)
        }
        // Writers in other processes committed twice in each of a hundred tries: the file
        // is in use and taken as it is (their commits would have met a missing page).
    }
}

/// LMDB's file format (mdb.c, unchanged since 0.9), read with pread: as much of it
/// as telling a truncated file from a whole one takes.
enum DataFile {
    struct Meta {
        var pageSize: Int
        var lastPage: Int
        var transactionID: Int
        var freeRoot: Int
    }

    // A page starts with a 16-byte header: page number, 2 bytes, flags (u16 at 10),
    // the end of the node pointers (u16 at 12; an overflow page's page count there).
    static let pageHeader = 16
    static let branchPage = 0x01, leafPage = 0x02
    /// A node whose value is on overflow pages (its value is their first page number).
    static let bigData = 0x01
    static let metaMagic: UInt32 = 0xBEEF_C0DE
    /// The root of an empty tree (all bits set).
    static let noPage = -1

    /// Bytes `offset..<offset+count` of the file, or nil when it ends before them.
    static func read(_ fd: Int32, at offset: Int, count: Int) -> [UInt8]? {
        guard count >= 0, offset >= 0 else { return nil }
        var bytes = [UInt8](repeating: 0, count: count)
        let got = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, count, off_t(offset)) }
        return got == count ? bytes : nil
    }

    /// A little-endian word; a 64-bit one above `Int.max` comes out negative.
    static func word<T: FixedWidthInteger>(_ bytes: [UInt8], _ offset: Int, _: T.Type) -> Int {
        bytes.withUnsafeBytes { Int(truncatingIfNeeded: T(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: T.self))) }
    }

    /// Meta page `page` (0 or 1) when it is one: the magic and version, then the map
    /// address and size, the free list's and the main tree's records (48 bytes each;
    /// the free list's first word is the page size, its last the root), the last page
    /// number and the transaction id.
    static func meta(_ fd: Int32, page: Int, pageSize: Int) -> Meta? {
        guard let m = read(fd, at: page * pageSize + pageHeader, count: 136),
              word(m, 0, UInt32.self) == Int(metaMagic), word(m, 4, UInt32.self) == 1 else { return nil }
        let size = word(m, 24, UInt32.self), lastPage = word(m, 120, UInt64.self)
        guard size >= 512, size <= 65536, size & (size - 1) == 0, lastPage >= 1, lastPage < 1 << 47 else { return nil }
        return Meta(pageSize: size, lastPage: lastPage, transactionID: word(m, 128, UInt64.self), freeRoot: word(m, 64, UInt64.self))
    }

    /// The file at `path` when LMDB refused it as invalid because it ends within its
    /// two meta pages, after a whole first one: cut short rather than not LMDB's.
    static func truncatedMetaPages(_ path: String) -> TruncatedDataFile? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, let meta = meta(fd, page: 0, pageSize: 0), Int(st.st_size) < 2 * meta.pageSize else { return nil }
        return TruncatedDataFile(file: path, size: Int(st.st_size), needed: max(2, meta.lastPage + 1) * meta.pageSize,
                                 pageSize: meta.pageSize, transactionID: meta.transactionID)
    }

    /// The file at `path` when LMDB refused it as invalid and exactly one of its two
    /// meta pages is valid: a damaged LMDB file rather than another kind of file.
    static func invalidMetaPage(_ path: String) -> InvalidMetaPage? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        // Page 0's meta is at a fixed offset; page 1's is one page further, and the page
        // size is the valid one's (tried at every size LMDB allows when page 0 is the bad one).
        if let first = meta(fd, page: 0, pageSize: 0) {
            guard meta(fd, page: 1, pageSize: first.pageSize) == nil else { return nil }
            return InvalidMetaPage(file: path, page: 1, offset: first.pageSize, otherTransactionID: first.transactionID)
        }
        for shift in 9...16 {
            let size = 1 << shift
            if let second = meta(fd, page: 1, pageSize: size), second.pageSize == size {
                return InvalidMetaPage(file: path, page: 0, offset: 0, otherTransactionID: second.transactionID)
            }
        }
        return nil
    }

    /// The file at `path` when its newer meta page names a last page past what a
    /// map can hold (LMDB then fails to map it, with ENOMEM or EINVAL): damaged.
    static func impossibleMeta(_ path: String) -> DamagedMetaPage? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, let first = read(fd, at: pageHeader, count: 136),
              word(first, 0, UInt32.self) == Int(metaMagic) else { return nil }
        let pageSize = word(first, 24, UInt32.self)
        guard pageSize >= 512, pageSize <= 65536, pageSize & (pageSize - 1) == 0 else { return nil }
        var newest: (lastPage: UInt64, transactionID: Int)?
        for page in 0..<2 {
            guard let m = read(fd, at: page * pageSize + pageHeader, count: 136), word(m, 0, UInt32.self) == Int(metaMagic) else { continue }
            let lastPage = UInt64(bitPattern: Int64(word(m, 120, UInt64.self))), txn = word(m, 128, UInt64.self)
            if newest == nil || txn > newest!.transactionID { newest = (lastPage, txn) }
        }
        guard let newest, newest.lastPage >= UInt64(Environment.largestMap / pageSize) else { return nil }
        return DamagedMetaPage(file: path, size: Int(st.st_size), lastPage: newest.lastPage, pageSize: pageSize, transactionID: newest.transactionID)
    }

    /// Whether every page of `pages` is in the free list that `meta` names. Each of its
    /// records is a count followed by that many page numbers (8-byte words). False when
    /// a page of the list itself is past `filePages` or is not a list page.
    static func areFree(pages: ClosedRange<Int>, fd: Int32, meta: Meta, filePages: Int) -> Bool {
        let size = meta.pageSize
        var free = Set<Int>()
        var pending = meta.freeRoot == noPage ? [] : [meta.freeRoot]
        var visited = 0
        while let number = pending.popLast() {
            visited += 1
            guard visited <= filePages, number >= 0, number < filePages, let page = read(fd, at: number * size, count: size) else { return false }
            let flags = word(page, 10, UInt16.self), lower = word(page, 12, UInt16.self)
            guard lower >= pageHeader, lower <= size, flags & (branchPage | leafPage) != 0 else { return false }
            for i in 0..<(lower - pageHeader) / 2 {
                // A node: value size (or child page) in two u16 words, flags, key size, then key and value.
                let node = word(page, pageHeader + 2 * i, UInt16.self)
                guard node + 8 <= size else { return false }
                let low = word(page, node, UInt16.self), high = word(page, node + 2, UInt16.self)
                let nodeFlags = word(page, node + 4, UInt16.self), keySize = word(page, node + 6, UInt16.self)
                if flags & branchPage != 0 {
                    pending.append(low | high << 16 | nodeFlags << 32)
                    continue
                }
                let valueSize = low | high << 16, valueAt = node + 8 + keySize
                let value: [UInt8]
                if nodeFlags & bigData != 0 {
                    guard valueAt + 8 <= size else { return false }
                    let first = word(page, valueAt, UInt64.self)
                    guard first >= 0, first < filePages, (first * size + pageHeader + valueSize + size - 1) / size <= filePages,
                          let v = read(fd, at: first * size + pageHeader, count: valueSize) else { return false }
                    value = v
                } else {
                    guard valueAt + valueSize <= size else { return false }
                    value = Array(page[valueAt..<valueAt + valueSize])
                }
                guard value.count >= 8 else { return false }
                let count = word(value, 0, UInt64.self)
                guard count >= 0, count < value.count / 8 else { return false }
                for j in stride(from: 1, through: count, by: 1) {
                    let p = word(value, 8 * j, UInt64.self)
                    if pages.contains(p) { free.insert(p) }
                }
            }
        }
        return free.count == pages.count
    }
}
