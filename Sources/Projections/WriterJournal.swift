import LMDB
import SubscriptionLog

/// What each live writer's transaction changed that other writers keep in
/// memory, so that a writer in another process can follow it instead of
/// reading the whole `devices` table again (about a second per million
/// devices, inside its write transaction, with every writer of the store
/// waiting): the device_id and token index entries it inserted and removed
/// (`DeviceDirectory`), and the device records it wrote or deleted
/// (`RecipientCache`).
///
/// One entry per transaction in `writer_state`, keyed `j` ‖ the sequence the
/// transaction started from (8 bytes, big-endian), holding the writer stamp
/// it started on and the one it wrote. A writer that holds state as of stamp
/// S at sequence N finds the entry at N, checks that it starts on S, applies
/// it, and goes on from its stamp and last sequence until it reaches the
/// stamp stored now. Any gap — a transaction too big to list
/// (`maxListedBytes`), an entry pruned or damaged, a writer that keeps no
/// journal — and it reads the table as before. Bookkeeping, like the stamp: never compared,
/// never rebuilt, not part of the projections.
///
/// The index entries are stored by their hash (`OrdinalIndex.hash`), which
/// is therefore part of the format: `hashVersion` changes with it, and an
/// entry of another version is a gap.
struct WriterJournal {
    struct Entry: Equatable {
        var previousStamp: UInt64?
        var stamp: UInt64
        var from: UInt64
        var through: UInt64
        /// False when the transaction changed too much to list: followers read the table.
        var listed: Bool
        var names: [DeviceDirectory.Change]
        /// Device records written or deleted, as pid << 32 | ordinal, ascending, each once.
        var devices: [UInt64]
    }

    static let formatVersion: UInt8 = 1
    static let hashVersion: UInt8 = 1
    /// An entry listing more than this is written unlisted. A server's
    /// transactions list a few dozen changes; a bulk load's batch of 4,096
    /// commands about 90 KB, and listing it is what lets a server beside the
    /// load follow it instead of reading `devices` again after every batch.
    /// Bigger transactions (an import, a load with a larger --batch) stay
    /// unlisted: an entry is one LMDB value, a run of contiguous pages.
    static let maxListedBytes = 1 << 20
    /// Entries of transactions that started more than this many sequences
    /// before the newest one are removed (a few per commit).
    static let keptSequences: UInt64 = 100_000
    static let prefix = UInt8(ascii: "j")

    static func key(_ from: UInt64) -> [UInt8] {
        var w = ByteWriter(capacity: 9); w.u8(prefix); w.u64(from)
        return w.bytes
    }

    /// The entry's bytes, each field stored in place in an array of their exact
    /// size: through `ByteWriter`, each integer was an `append(contentsOf:)`
    /// of about 110 instructions (a bulk load's batch lists some 3,500 of
    /// them: 1.6% of its writer thread, callgrind).
    static func encode(_ e: Entry) -> [UInt8] {
        let listed = e.listed && e.names.count * 17 + e.devices.count * 8 <= maxListedBytes
        let size = 3 + 4 * 8 + 2 * 4 + (listed ? e.names.count * 17 + e.devices.count * 8 : 0)
        return [UInt8](unsafeUninitializedCapacity: size) { buffer, initialized in
            var w = Placed(base: UnsafeMutableRawPointer(buffer.baseAddress!))
            w.u8(formatVersion); w.u8(hashVersion)
            w.u8((listed ? 1 : 0) | (e.previousStamp == nil ? 0 : 2))
            w.u64(e.previousStamp ?? 0); w.u64(e.stamp); w.u64(e.from); w.u64(e.through)
            w.u32(listed ? UInt32(e.names.count) : 0); w.u32(listed ? UInt32(e.devices.count) : 0)
            if listed {
                for c in e.names {
                    w.u8((c.name == .token ? 1 : 0) | (c.insert ? 2 : 0)); w.u32(c.pid); w.u64(c.hash); w.u32(c.ordinal)
                }
                for d in e.devices { w.u64(d) }
            }
            precondition(w.at == size, "a journal entry's size")
            initialized = size
        }
    }

    /// Big-endian fields stored one after another from `base`.
    private struct Placed {
        let base: UnsafeMutableRawPointer
        var at = 0
        mutating func u8(_ v: UInt8) { base.storeBytes(of: v, toByteOffset: at, as: UInt8.self); at += 1 }
        mutating func u32(_ v: UInt32) { base.storeBytes(of: v.bigEndian, toByteOffset: at, as: UInt32.self); at += 4 }
        mutating func u64(_ v: UInt64) { base.storeBytes(of: v.bigEndian, toByteOffset: at, as: UInt64.self); at += 8 }
    }

    /// The entry, or nil when it is of another format or hash version (a gap).
    static func decode(_ bytes: UnsafeRawBufferPointer, at place: String) throws -> Entry? {
        var r = ByteReader(bytes)
        do {
            guard try r.u8() == formatVersion, try r.u8() == hashVersion else { return nil }
            let flags = try r.u8()
            let previous = try r.u64(), stamp = try r.u64(), from = try r.u64(), through = try r.u64()
            let nNames = Int(try r.u32()), nDevices = Int(try r.u32())
            guard nNames * 17 + nDevices * 8 == r.remaining else {
                throw ProjectionCorruption(place: place, reason: "journal entry of \(bytes.count) bytes lists \(nNames) + \(nDevices) changes")
            }
            var names: [DeviceDirectory.Change] = []
            names.reserveCapacity(nNames)
            for _ in 0..<nNames {
                let kind = try r.u8()
                names.append(.init(name: kind & 1 != 0 ? .token : .deviceID, insert: kind & 2 != 0,
                                   pid: try r.u32(), hash: try r.u64(), ordinal: try r.u32()))
            }
            var devices: [UInt64] = []
            devices.reserveCapacity(nDevices)
            for _ in 0..<nDevices { devices.append(try r.u64()) }
            return Entry(previousStamp: flags & 2 != 0 ? previous : nil, stamp: stamp, from: from, through: through,
                         listed: flags & 1 != 0, names: names, devices: devices)
        } catch is ByteReader.OutOfBounds {
            throw ProjectionCorruption(place: place, reason: "journal entry of \(bytes.count) bytes is cut short")
        }
    }

    /// Writes the entry of the transaction in `txn` and removes a few entries too old to be followed.
    static func write(_ entry: Entry, _ tables: ProjectionTables, _ txn: borrowing Transaction) throws {
        guard let state = tables.writerState else { preconditionFailure("projections written in a read-only environment") }
        try txn.put(state, key(entry.from), encode(entry))
        guard entry.from > keptSequences else { return }
        let oldest = key(entry.from - keptSequences)
        let first = key(0)
        try txn.withCursor(state) { cursor in
            for _ in 0..<4 {
                guard let (k, _) = try cursor.seek(atLeast: first), k.count == 9, k[0] == prefix,
                      k.lexicographicallyPrecedes(oldest) else { return }
                try cursor.deleteCurrent()
            }
        }
    }

    /// The entries that take the store from (`stamp`, `sequence`) to the state
    /// `txn` sees (stamp `stored`, `appliedSequence`), in order; nil when they
    /// cannot be followed. Empty when nothing was written since.
    static func chain(from stamp: UInt64?, at sequence: UInt64, to stored: UInt64?, appliedSequence: UInt64,
                      _ tables: ProjectionTables, _ txn: borrowing Transaction, maxEntries: Int = 100_000) throws -> [Entry]? {
        guard let state = tables.writerState else { return nil }
        var entries: [Entry] = []
        var stamp = stamp, sequence = sequence
        while stamp != stored || sequence != appliedSequence {
            // An entry that does not decode is a gap too: it is bookkeeping, the table is
            // the truth, and reading the table is what a restarted writer would do anyway.
            guard entries.count < maxEntries, sequence < appliedSequence,
                  let bytes = try txn.get(state, key(sequence)),
                  let entry = try? decode(bytes, at: "writer_state/j\(sequence)"),
                  entry.listed, entry.previousStamp == stamp, entry.from == sequence, entry.through > sequence
            else { return nil }
            entries.append(entry)
            stamp = entry.stamp
            sequence = entry.through
        }
        return entries
    }
}
