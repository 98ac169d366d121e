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
    /// Device → where its record lies in `bytes`; nil once deleted. An open-addressing
    /// table: a `Dictionary` keyed by pid ‖ ordinal seeded SipHash at each of the
    /// ~770k lookups and stores of a 261k-command load.
    private var records = SlotTable<ProjectionWriter.DeviceKey, Range<Int>?>(capacity: 4096)

    mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        if records.count > 0 { records.removeAll() }
    }

    /// Device `ordinal`'s record is now `record` (as written, or as read from the table).
    mutating func set(_ pid: UInt32, _ ordinal: UInt32, _ record: UnsafeRawBufferPointer) {
        let start = bytes.count
        bytes.append(contentsOf: record)
        let key = ProjectionWriter.DeviceKey(pid: pid, ordinal: ordinal)
        if let slot = records.slot(of: key) {
            records.values[slot] = start..<bytes.count
        } else {
            records.insert(key, start..<bytes.count)
        }
    }

    /// Device `ordinal` was deleted: the table answers for it again.
    mutating func remove(_ pid: UInt32, _ ordinal: UInt32) {
        if let slot = records.slot(of: ProjectionWriter.DeviceKey(pid: pid, ordinal: ordinal)) { records.values[slot] = nil }
    }

    /// Calls `body` with device `ordinal`'s record when this transaction holds
    /// it; nil (without calling it) otherwise.
    func withRecord<R>(_ pid: UInt32, _ ordinal: UInt32, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R? {
        guard let slot = records.slot(of: ProjectionWriter.DeviceKey(pid: pid, ordinal: ordinal)),
              let range = records.values[slot] else { return nil }
        return try bytes.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[range])) }
    }
}
