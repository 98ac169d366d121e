import LMDB

/// The greatest key a writer knows a table to hold in its open transaction,
/// in LMDB's order (bytewise, a prefix before its extensions): a key that
/// sorts after it is not in the table, with no B-tree search to say so.
///
/// The key is kept in one array reused from key to key and compared by
/// `keySortsBefore`, the tables' own comparison: kept as a new array per key
/// and compared by `lexicographicallyPrecedes`, it cost a new per-user topic
/// ~600 instructions of allocation, release and generic iteration (callgrind).
struct GreatestKey {
    /// Whether the table's greatest key was read in this transaction;
    /// `precedes` answers only after it was.
    var read = false
    /// Whether any key is known (the table held one, or one was put).
    private var present = false
    private var bytes: [UInt8] = []

    /// Whether the known greatest key sorts before `key` (so `key` is not in
    /// the table); true when the table holds no key. False until `read`.
    func precedes(_ key: UnsafeRawBufferPointer) -> Bool {
        read && (!present || sortsBefore(key))
    }

    /// Notes that `key` is in the table: it becomes the greatest when it
    /// sorts after the one known.
    mutating func raise(to key: UnsafeRawBufferPointer) {
        if present && !sortsBefore(key) { return }
        if bytes.count != key.count { bytes = [UInt8](repeating: 0, count: key.count) }
        if key.count > 0 { bytes.withUnsafeMutableBytes { $0.copyMemory(from: key) } }
        present = true
    }

    /// Whether the known key sorts before `key`, in the tables' order.
    private func sortsBefore(_ key: UnsafeRawBufferPointer) -> Bool {
        bytes.withUnsafeBytes { keySortsBefore($0, key) }
    }
}
