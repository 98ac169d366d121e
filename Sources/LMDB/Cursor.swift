internal import CLMDB

/// A position in a database, lent by `Transaction.withCursor`.
/// Keys and values it returns are borrowed from the map until the transaction ends.
public struct Cursor {
    let pointer: OpaquePointer
    /// Its write transaction's note of a change (`Transaction.hasChanges`).
    let changes: UnsafeMutablePointer<Bool>?

    public typealias Entry = (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)

    private func op(_ operation: MDB_cursor_op, key: UnsafeRawBufferPointer? = nil) throws -> Entry? {
        var k = MDB_val(mv_size: key?.count ?? 0, mv_data: UnsafeMutableRawPointer(mutating: key?.baseAddress))
        var v = MDB_val()
        let rc = mdb_cursor_get(pointer, &k, &v, operation)
        if rc == MDB_NOTFOUND { return nil }
        try check(rc)
        return (UnsafeRawBufferPointer(start: k.mv_data, count: k.mv_size),
                UnsafeRawBufferPointer(start: v.mv_data, count: v.mv_size))
    }

    public func first() throws -> Entry? { try op(MDB_FIRST) }
    public func last() throws -> Entry? { try op(MDB_LAST) }
    public func next() throws -> Entry? { try op(MDB_NEXT) }
    public func previous() throws -> Entry? { try op(MDB_PREV) }
    public func current() throws -> Entry? { try op(MDB_GET_CURRENT) }

    /// Positions at `key` exactly.
    public func seek(exactly key: UnsafeRawBufferPointer) throws -> Entry? { try op(MDB_SET_KEY, key: key) }
    public func seek(exactly key: [UInt8]) throws -> Entry? {
        try key.withUnsafeBytes { (k) throws in try op(MDB_SET_KEY, key: k) }
    }

    /// Positions at the first key greater than or equal to `key`.
    public func seek(atLeast key: UnsafeRawBufferPointer) throws -> Entry? { try op(MDB_SET_RANGE, key: key) }
    public func seek(atLeast key: [UInt8]) throws -> Entry? {
        try key.withUnsafeBytes { (k) throws in try op(MDB_SET_RANGE, key: k) }
    }

    /// Stores `value` under `key` and leaves the cursor there. With `.append`
    /// (keys in ascending order, a bulk load) the cursor stays on the last
    /// page instead of searching the tree from its root for every key.
    public func put(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer,
                    flags: Transaction.PutFlags = []) throws {
        var k = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var v = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        try check(mdb_cursor_put(pointer, &k, &v, flags.rawValue))
        changes?.pointee = true
    }

    /// Reserves `count` bytes under `key`, lets `fill` write them in place in
    /// the map, and leaves the cursor there. Keys given in ascending order stay
    /// on the cursor's leaf page while they fit there, instead of searching the
    /// tree from its root for each.
    public func put(_ key: UnsafeRawBufferPointer, reserving count: Int, flags: Transaction.PutFlags = [],
                    fill: (UnsafeMutableRawBufferPointer) -> Void) throws {
        var k = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var v = MDB_val(mv_size: count, mv_data: nil)
        try check(mdb_cursor_put(pointer, &k, &v, flags.rawValue | UInt32(MDB_RESERVE)))
        changes?.pointee = true
        fill(UnsafeMutableRawBufferPointer(start: v.mv_data, count: count))
    }

    /// Deletes `key` if it is there (and leaves the cursor near it); returns whether it was.
    @discardableResult
    public func delete(_ key: UnsafeRawBufferPointer) throws -> Bool {
        guard try seek(exactly: key) != nil else { return false }
        try deleteCurrent()
        return true
    }

    /// Deletes the entry under the cursor.
    public func deleteCurrent() throws {
        try check(mdb_cursor_del(pointer, 0))
        changes?.pointee = true
    }
}
