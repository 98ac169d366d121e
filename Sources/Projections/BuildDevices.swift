import Glibc
import SubscriptionLog

/// A build's device records by project and ordinal, each held as its bytes in
/// the text form (`DeviceRecord.encodeText`: the names as their UTF-8, which
/// `DeviceRecord.fields(of:)` reads) back to back in one arena.
///
/// A record held as a `DeviceRecord` kept the two strings the log reader had
/// decoded for its event alive until the build was written: two heap objects
/// per device (~250 bytes with the record, for an APNs device), first touched
/// on the reader's thread, then retained and released by every read of the
/// record. Here a device takes its record's bytes (~130 for an APNs device),
/// the reader's strings are freed after their event, and a name is compared
/// where it lies (`matches`). The stored form (UUIDs and hex in half their
/// bytes) is made once, when the build is written (`EncodedDevices`).
///
/// A class, as `NameIndex`: the arena is memory it allocates and frees itself.
/// Only the folding thread changes it; the write-out only reads it.
final class BuildDevices: @unchecked Sendable {
    /// Each device's place: 0 not held (ask the target), `deleted`, or
    /// (offset + 1) << 16 | length of its bytes in the arena.
    private var places = OrdinalColumns<UInt64>(empty: 0)
    private static let deleted: UInt64 = 1

    private var arena: UnsafeMutableRawPointer
    private var arenaCount = 0
    private var arenaCapacity: Int
    /// Bytes of records that a longer one replaced (left where they were).
    private(set) var abandoned = 0

    init(reserving bytes: Int = 1 << 16) {
        arenaCapacity = max(bytes, 1 << 12)
        arena = malloc(arenaCapacity)!
    }

    deinit { free(arena) }

    /// Makes room for about `count` devices (a hint): their places in the
    /// first project's column, and 192 bytes each in the arena (an APNs
    /// device takes ~122, an FCM one ~218): address space only, until the
    /// records are written, where growing copies what is there.
    func reserve(devices count: Int) {
        places.reserveFirstColumn(count)
        grow(to: count * 192)
    }

    /// Bytes held, roughly (for the build's memory budget): the arena's bytes
    /// in use, as a reservation beyond them is address space never touched.
    var footprint: Int { arenaCount + places.slots * MemoryLayout<UInt64>.stride }

    /// Records held (deleted ones included), for the write-out's reservations.
    var slots: Int { places.slots }

    /// Bytes of the records held (the arena's bytes in use, less those left
    /// behind by a longer record).
    var bytesHeld: Int { arenaCount - abandoned }

    private func grow(to capacity: Int) {
        guard capacity > arenaCapacity else { return }
        guard let grown = realloc(arena, capacity) else { fatalError("out of memory for \(capacity) bytes of device records") }
        (arena, arenaCapacity) = (grown, capacity)
    }

    /// `body` applied to device `ordinal`'s bytes: `.some(bytes)` when the
    /// build holds it, `.some(nil)` when it was deleted; nil when the build
    /// does not hold it.
    @inline(__always)
    func withRecord<R>(_ pid: UInt32, _ ordinal: UInt32, _ body: (UnsafeRawBufferPointer?) throws -> R) rethrows -> R? {
        guard let place = places.value(pid, ordinal), place != 0 else { return nil }
        if place == Self.deleted { return try body(nil) }
        return try body(bytes(at: place))
    }

    @inline(__always)
    private func bytes(at place: UInt64) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: arena + Int(place >> 16 - 1), count: Int(place & 0xFFFF))
    }

    /// Whether the build's device `ordinal` has `value` as its device_id or
    /// its token (live or rejected), compared in place; nil when the build
    /// does not hold the device.
    @inline(__always)
    func device(_ pid: UInt32, _ ordinal: UInt32, matches name: DeviceDirectory.Name, _ value: NameText) -> Bool? {
        withRecord(pid, ordinal) { b -> Bool in
            guard let b else { return false }
            return name == .deviceID ? DeviceRecord.textForm(b, hasDeviceID: value.utf8) : DeviceRecord.textForm(b, holds: value.utf8)
        }
    }

    /// Device `ordinal`: `.some(record)`, `.some(nil)` when it was deleted,
    /// nil when the build does not hold it.
    func record(_ pid: UInt32, _ ordinal: UInt32) throws -> DeviceRecord?? {
        try withRecord(pid, ordinal) { b -> DeviceRecord? in
            guard let b else { return nil }
            return try DeviceRecord(decoding: b, at: "the build's device \(pid)/\(ordinal)")
        }
    }

    /// Holds `device` as device `ordinal`'s record (nil: deleted). A record
    /// no longer than the one held takes its place; a longer one is appended.
    func put(_ device: DeviceRecord?, _ pid: UInt32, _ ordinal: UInt32) {
        // Read through `?.`: a `guard let` copy retained and released its strings.
        guard let size = device?.textFormSize else {
            places.update(pid, ordinal, Self.deleted)
            return
        }
        device?.encodeText(into: place(size, pid, ordinal))
    }

    /// Puts the record of a device with a live token, from the names where
    /// they are (`DeviceRecord.encodeText(deviceID:token:...)`).
    func put(deviceID: NameText, token: NameText, platform: Platform, tokenTime: Int64, _ pid: UInt32, _ ordinal: UInt32) {
        let size = 22 + deviceID.utf8.count + token.utf8.count
        DeviceRecord.encodeText(deviceID: deviceID.utf8, token: token.utf8, platform: platform, tokenTime: tokenTime,
                                into: place(size, pid, ordinal))
    }

    /// A token change of device `ordinal` (`ProjectionWriter.replaceToken`),
    /// made to its bytes: the record keeps its device_id and takes `token`,
    /// `platform` and `tokenTime`, with no rejection. Returns what it held
    /// before; nil when the build does not hold the device, `.some(nil)` when
    /// it was deleted. The old token is compared and hashed where it lies: a
    /// `DeviceRecord` made its two names into strings, freed after the event
    /// (~1,250 instructions a token change, callgrind of a rebuild).
    func replaceToken(_ pid: UInt32, _ ordinal: UInt32, with token: NameText, platform: Platform,
                      tokenTime: Int64) throws -> HeldToken?? {
        guard let old = places.value(pid, ordinal), old != 0 else { return nil }
        if old == Self.deleted { return .some(nil) }
        let b = bytes(at: old), offset = Int(old >> 16 - 1)
        let flags = b[0], idCount = Int(b.loadBigEndian(at: 18, as: UInt16.self))
        guard b[1] == 0 || Platform(rawValue: b[1]) != nil else {
            throw ProjectionCorruption(place: "the build's device \(pid)/\(ordinal)", reason: "unknown platform \(b[1])")
        }
        let live = flags & (DeviceRecord.hasTokenFlag | DeviceRecord.rejectedFlag) == DeviceRecord.hasTokenFlag
        var held = HeldToken(platform: Platform(rawValue: b[1]), live: live, token: .none)
        if flags & DeviceRecord.hasTokenFlag != 0 {
            held.token = DeviceRecord.textForm(b, holds: token.utf8)
                ? .same : .other(hash: OrdinalIndex.hash(pid, UnsafeRawBufferPointer(rebasing: b[(22 + idCount)...])))
        }
        let size = 22 + idCount + token.utf8.count
        // In place when it fits (the device_id stays where it is), else appended with the device_id copied.
        let p = place(size, pid, ordinal)
        if p != arena + offset { (p + 18).copyMemory(from: arena + offset + 18, byteCount: 2 + idCount) }
        DeviceRecord.encodeTextHead(hasToken: true, platform: platform, tokenTime: tokenTime, rejectedAt: nil, into: p)
        _ = DeviceRecord.storeText(token.utf8, at: p + 20 + idCount)
        return .some(held)
    }

    /// Marks the token of device `ordinal` (which holds one) rejected at
    /// `rejectedAt`, in place: the text form keeps a rejection time's room in
    /// every record. nil when the build does not hold the device, false when
    /// it was deleted.
    func markRejected(_ pid: UInt32, _ ordinal: UInt32, at rejectedAt: Int64) -> Bool? {
        guard let place = places.value(pid, ordinal), place != 0 else { return nil }
        if place == Self.deleted { return false }
        let p = arena + Int(place >> 16 - 1)
        p.storeBytes(of: p.load(as: UInt8.self) | DeviceRecord.rejectedFlag, as: UInt8.self)
        p.storeBytes(of: UInt64(bitPattern: rejectedAt).bigEndian, toByteOffset: 10, as: UInt64.self)
        return true
    }

    /// Where device `ordinal`'s record of `size` bytes goes: in place of the
    /// one it replaces when that is no shorter, else appended.
    private func place(_ size: Int, _ pid: UInt32, _ ordinal: UInt32) -> UnsafeMutableRawPointer {
        precondition(size <= 0xFFFF, "a device record of \(size) bytes")
        let old = places.value(pid, ordinal) ?? 0
        let offset: Int
        if old > Self.deleted, Int(old & 0xFFFF) >= size {
            offset = Int(old >> 16 - 1)
            abandoned += Int(old & 0xFFFF) - size
        } else {
            if old > Self.deleted { abandoned += Int(old & 0xFFFF) }
            if arenaCount + size > arenaCapacity { grow(to: max(2 * arenaCapacity, arenaCount + size)) }
            offset = arenaCount
            arenaCount += size
        }
        places.update(pid, ordinal, UInt64(offset + 1) << 16 | UInt64(size))
        return arena + offset
    }

    /// Every place, projects in ascending id order, ordinals ascending:
    /// `body(pid, ordinal, bytes)`, bytes nil for a deleted device.
    func forEachInKeyOrder(_ body: (UInt32, UInt32, UnsafeRawBufferPointer?) -> Void) {
        for (c, pid) in places.projects.enumerated().sorted(by: { $0.element < $1.element }) {
            places.columns[c].withUnsafeBufferPointer { column in
                for (ordinal, place) in column.enumerated() where place != 0 {
                    body(pid, UInt32(ordinal), place == Self.deleted ? nil : bytes(at: place))
                }
            }
        }
    }
}
