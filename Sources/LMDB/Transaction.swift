internal import CLMDB

/// A read or write transaction. Non-copyable and only lent to closures by
/// `Environment.read` and `Environment.write`, so it cannot outlive its scope.
///
/// Byte buffers returned by `get` and cursors point into the memory map and
/// are valid only until the transaction ends: copy what you keep.
public struct Transaction: ~Copyable {
    let pointer: OpaquePointer
    public let isReadOnly: Bool
    /// A write transaction's note that it changed something (a put, a delete, a
    /// clear or a drop, here or through a cursor); nil for a read transaction.
    let changes: UnsafeMutablePointer<Bool>?

    init(environment: Environment, readOnly: Bool) throws {
        var txn: OpaquePointer?
        try check(mdb_txn_begin(environment.pointer, nil, readOnly ? UInt32(MDB_RDONLY) : 0, &txn))
        guard let txn else { throw LMDBError.badTransaction }
        self.pointer = txn
        self.isReadOnly = readOnly
        if readOnly {
            changes = nil
        } else {
            changes = .allocate(capacity: 1)
            changes!.initialize(to: false)
        }
    }

    consuming func commit() throws {
        defer { changes?.deallocate() }
        try check(mdb_txn_commit(pointer))
    }

    consuming func abort() {
        mdb_txn_abort(pointer)
        changes?.deallocate()
    }

    /// Whether this write transaction changed anything so far. One that did
    /// not commits no new snapshot: LMDB's newest transaction stays the one
    /// before, and its id is taken by the next write that does change something.
    public var hasChanges: Bool { changes?.pointee ?? false }

    @inline(__always)
    func noteChange() { changes?.pointee = true }

    /// The LMDB transaction id (increases with every committed write).
    public var id: Int { Int(mdb_txn_id(pointer)) }

    // MARK: Point operations

    /// The value stored under `key`, or nil; borrowed from the map until the transaction ends.
    public func get(_ db: Database, _ key: UnsafeRawBufferPointer) throws -> UnsafeRawBufferPointer? {
        var k = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var v = MDB_val()
        let rc = mdb_get(pointer, db.handle, &k, &v)
        if rc == MDB_NOTFOUND { return nil }
        try check(rc)
        return UnsafeRawBufferPointer(start: v.mv_data, count: v.mv_size)
    }

    public func get(_ db: Database, _ key: [UInt8]) throws -> UnsafeRawBufferPointer? {
        try key.withUnsafeBytes { (k) throws in try get(db, k) }
    }

    public struct PutFlags: OptionSet, Sendable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        public static let noOverwrite = PutFlags(rawValue: UInt32(MDB_NOOVERWRITE))
        /// Keys must be appended in order (fast path for the log).
        public static let append = PutFlags(rawValue: UInt32(MDB_APPEND))
    }

    public func put(_ db: Database, _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer,
                    flags: PutFlags = []) throws {
        var k = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var v = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        try check(mdb_put(pointer, db.handle, &k, &v, flags.rawValue))
        noteChange()
    }

    /// `put`, for a key that usually sorts after every key of `db` (a new
    /// device's record, a new topic's code): appended there with `MDB_APPEND`
    /// (no search from the root, nothing moved aside in the leaf) when it
    /// does, else put as `put` puts it.
    public func putProbablyLast(_ db: Database, _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws {
        var k = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var v = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        var rc = mdb_put(pointer, db.handle, &k, &v, UInt32(MDB_APPEND))
        // Not after the last key (LMDB looked, and changed nothing): an ordinary put.
        if rc == MDB_KEYEXIST { rc = mdb_put(pointer, db.handle, &k, &v, 0) }
        try check(rc)
        noteChange()
    }

    public func put(_ db: Database, _ key: [UInt8], _ value: [UInt8], flags: PutFlags = []) throws {
        try key.withUnsafeBytes { (k) throws in
            try value.withUnsafeBytes { (v) throws in try put(db, k, v, flags: flags) }
        }
    }

    /// Reserves `count` bytes for `key` and lets `fill` write them in place in the map.
    public func put(_ db: Database, _ key: [UInt8], reserving count: Int, flags: PutFlags = [],
                    fill: (UnsafeMutableRawBufferPointer) -> Void) throws {
        try key.withUnsafeBytes { (kb) throws in
            var k = MDB_val(mv_size: kb.count, mv_data: UnsafeMutableRawPointer(mutating: kb.baseAddress))
            var v = MDB_val(mv_size: count, mv_data: nil)
            try check(mdb_put(pointer, db.handle, &k, &v, flags.rawValue | UInt32(MDB_RESERVE)))
            noteChange()
            fill(UnsafeMutableRawBufferPointer(start: v.mv_data, count: count))
        }
    }

    /// Deletes `key`; returns false when it was not there.
    @discardableResult
    public func delete(_ db: Database, _ key: [UInt8]) throws -> Bool {
        try key.withUnsafeBytes { (kb) throws -> Bool in
            var k = MDB_val(mv_size: kb.count, mv_data: UnsafeMutableRawPointer(mutating: kb.baseAddress))
            let rc = mdb_del(pointer, db.handle, &k, nil)
            if rc == MDB_NOTFOUND { return false }
            try check(rc)
            noteChange()
            return true
        }
    }

    /// Removes every entry of `db` (the database itself stays).
    public func clear(_ db: Database) throws {
        try check(mdb_drop(pointer, db.handle, 0))
        noteChange()
    }

    /// Deletes database `db` from the environment and closes its handle
    /// (`mdb_drop` with `del`): its pages go back to the free list.
    public func drop(_ db: Database) throws {
        try check(mdb_drop(pointer, db.handle, 1))
        noteChange()
    }

    /// The named database, or nil when the environment has none of that name.
    public func openDatabaseIfPresent(_ name: String) throws -> Database? {
        var dbi: MDB_dbi = 0
        let rc = mdb_dbi_open(pointer, name, 0, &dbi)
        if rc == MDB_NOTFOUND { return nil }
        try check(rc)
        try orderKeysFast(pointer, dbi)
        return Database(handle: dbi, name: name)
    }

    public struct Statistics: Sendable {
        public var entries: Int
        public var pageSize: Int
        public var branchPages: Int
        public var leafPages: Int
        public var overflowPages: Int
        public var depth: Int
        public var bytes: Int { (branchPages + leafPages + overflowPages) * pageSize }

        /// Why these counts cannot be a table's in a map of `mapPages` pages, or nil.
        /// (A node takes at least 8 bytes of its leaf page, so a leaf holds fewer than
        /// pageSize / 8 entries.)
        func implausibility(mapPages: Int) -> String? {
            let counts = [("branch", branchPages), ("leaf", leafPages), ("overflow", overflowPages)]
            for (name, n) in counts where n < 0 || n > mapPages {
                return "it counts \(UInt(bitPattern: n)) \(name) pages, more than the map's \(mapPages)"
            }
            if branchPages + leafPages + overflowPages > mapPages {
                return "it counts \(branchPages + leafPages + overflowPages) pages, more than the map's \(mapPages)"
            }
            if entries < 0 || entries / max(pageSize / 8, 1) > leafPages {
                return "it counts \(UInt(bitPattern: entries)) entries, more than its \(leafPages) leaf pages can hold"
            }
            return nil
        }
    }

    /// The counts of `db`'s record in the table of tables. LMDB keeps them as written,
    /// so a damaged record gives any numbers: counts no map could hold (more pages than
    /// the map has, more entries than its leaf pages can) are `DamagedTableRecord`.
    /// Within those bounds `bytes` cannot overflow.
    public func statistics(_ db: Database) throws -> Statistics {
        var s = MDB_stat()
        try check(mdb_stat(pointer, db.handle, &s))
        let stats = Statistics(entries: s.ms_entries, pageSize: Int(s.ms_psize), branchPages: s.ms_branch_pages,
                               leafPages: s.ms_leaf_pages, overflowPages: s.ms_overflow_pages, depth: Int(s.ms_depth))
        var info = MDB_envinfo()
        mdb_env_info(mdb_txn_env(pointer), &info)
        if let reason = stats.implausibility(mapPages: info.me_mapsize / max(stats.pageSize, 1)) {
            throw DamagedTableRecord(table: db.name, reason: reason)
        }
        return stats
    }

    /// Pages of the file that are free in this transaction's view: the page
    /// numbers LMDB's free list (database 0) holds, each record an `MDB_IDL`
    /// whose first word is its count. A compacting copy writes the pages in
    /// use, `Environment.Info.lastPage + 1` minus these.
    public func freePages() throws -> Int {
        var cursor: OpaquePointer?
        try check(mdb_cursor_open(pointer, 0, &cursor))  // FREE_DBI
        guard let cursor else { throw LMDBError.badTransaction }
        defer { mdb_cursor_close(cursor) }
        var total = 0
        var k = MDB_val(), v = MDB_val()
        var rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST)
        while rc == 0 {
            if v.mv_size >= MemoryLayout<Int>.size, let data = v.mv_data {
                total += data.loadUnaligned(as: Int.self)
            }
            rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
        }
        if rc != MDB_NOTFOUND { try check(rc) }
        return total
    }

    /// Runs `body` with a cursor on `db`, closed when `body` returns.
    public func withCursor<R>(_ db: Database, _ body: (inout Cursor) throws -> R) throws -> R {
        var cursor: OpaquePointer?
        try check(mdb_cursor_open(pointer, db.handle, &cursor))
        guard let cursor else { throw LMDBError.badTransaction }
        defer { mdb_cursor_close(cursor) }
        var c = Cursor(pointer: cursor, changes: changes)
        return try body(&c)
    }
}
