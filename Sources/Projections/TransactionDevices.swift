/// The device records the live writer wrote or read in the open transaction,
/// encoded as in the `devices` table, by project and ordinal.
///
/// A device_id or token lookup confirms its candidate against the device's
/// record, and a token event then reads that record to change it. Both
/// searched the `devices` B-tree (about 2,200 instructions a search), also
/// for a record the same transaction had just written: the register that
/// follows a new device's token, as the SDKs send them, confirmed its
/// device_id against the record the token had put a moment before. Here it
/// is one hash probe.
///
/// Only the open transaction's: `removeAll` at every `begin`, so a record
/// never outlives the transaction that wrote or read it (an aborted one's
/// writes are gone with it).
struct TransactionDevices {
    private var bytes: [UInt8] = []
    /// pid << 32 | ordinal → where its record lies in `bytes`.
    private var records: [UInt64: Range<Int>] = [:]

    mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        records.removeAll(keepingCapacity: true)
    }

    /// Device `ordinal`'s record is now `record` (as written, or as read from the table).
    mutating func set(_ pid: UInt32, _ ordinal: UInt32, _ record: UnsafeRawBufferPointer) {
        let start = bytes.count
        bytes.append(contentsOf: record)
        records[Self.key(pid, ordinal)] = start..<bytes.count
    }

    /// Device `ordinal` was deleted: the table answers for it again.
    mutating func remove(_ pid: UInt32, _ ordinal: UInt32) {
        records[Self.key(pid, ordinal)] = nil
    }

    /// Calls `body` with device `ordinal`'s record when this transaction holds
    /// it; nil (without calling it) otherwise.
    func withRecord<R>(_ pid: UInt32, _ ordinal: UInt32, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R? {
        guard let range = records[Self.key(pid, ordinal)] else { return nil }
        return try bytes.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[range])) }
    }

    @inline(__always)
    private static func key(_ pid: UInt32, _ ordinal: UInt32) -> UInt64 { UInt64(pid) << 32 | UInt64(ordinal) }
}
