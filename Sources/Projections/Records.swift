import Glibc
import SubscriptionLog

/// What is known of a device. Its dense ordinal is its key in the device table
/// and its position in every topic bitmap.
public struct DeviceRecord: Sendable, Hashable {
    public enum State: String, Sendable {
        /// Has a token that no provider has rejected: it is targeted.
        case live
        /// Its token was rejected by the provider and not re-registered since.
        case rejected
        /// Never had a token, or its token moved to another device.
        case noToken = "no-token"
    }

    public var deviceID: String
    public var token: String?
    public var platform: Platform?
    /// Store time (ms) of the last token change, compared with rejection times.
    public var tokenTime: Int64
    /// Provider time (ms) of the rejection that stopped the token, when rejected.
    public var rejectedAt: Int64?

    public var state: State {
        if token == nil { return .noToken }
        return rejectedAt == nil ? .live : .rejected
    }

    public init(deviceID: String, token: String? = nil, platform: Platform? = nil, tokenTime: Int64 = 0, rejectedAt: Int64? = nil) {
        self.deviceID = deviceID
        self.token = token
        self.platform = platform
        self.tokenTime = tokenTime
        self.rejectedAt = rejectedAt
    }

    /// Flag bits of the record's first byte.
    static let hasTokenFlag: UInt8 = 1, rejectedFlag: UInt8 = 2
    /// Set in records written since schema 4: the names are `StoredName`s,
    /// and the rejection time and the token are there only when flagged.
    static let storedNamesFlag: UInt8 = 4

    // Schema 4: u8 flags (1 token, 2 rejected, 4 stored names) ‖ u8 platform ‖ i64 tokenTime
    //   ‖ [i64 rejectedAt, when rejected] ‖ name deviceID ‖ [name token, when it has one]
    // Before (flag 4 clear, still read): u8 flags ‖ u8 platform ‖ i64 tokenTime ‖ i64 rejectedAt
    //   ‖ str deviceID ‖ str token (empty when none)
    func encoded() -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: maximumEncodedSize) { buffer, initialized in
            initialized = encode(into: UnsafeMutableRawPointer(buffer.baseAddress!))
        }
    }

    /// The most `encoded()` can take: names as text. (The exact length needs
    /// each name scanned for its shape, which `encode` does once.)
    var maximumEncodedSize: Int { 24 + deviceID.utf8.count + (token?.utf8.count ?? 0) }

    /// Writes the encoded record at `p` (which has room for `maximumEncodedSize`
    /// bytes) and returns its length: a build encodes a million devices back
    /// to back into one buffer, without an array or a bounds check per field.
    func encode(into p: UnsafeMutableRawPointer) -> Int {
        var flags = Self.storedNamesFlag
        if token != nil { flags |= Self.hasTokenFlag }
        if rejectedAt != nil { flags |= Self.rejectedFlag }
        p.storeBytes(of: flags, as: UInt8.self)
        p.storeBytes(of: platform?.rawValue ?? 0, toByteOffset: 1, as: UInt8.self)
        p.storeBytes(of: UInt64(bitPattern: tokenTime).bigEndian, toByteOffset: 2, as: UInt64.self)
        var at = 10
        if let rejectedAt {
            p.storeBytes(of: UInt64(bitPattern: rejectedAt).bigEndian, toByteOffset: at, as: UInt64.self)
            at += 8
        }
        StoredName.write(deviceID, StoredName.plan(deviceID).form, at: p, &at)
        if let token { StoredName.write(token, StoredName.plan(token).form, at: p, &at) }
        return at
    }

    /// Decodes a stored record (either format); `place` names it in the error.
    public init(decoding bytes: UnsafeRawBufferPointer, at place: @autoclosure () -> String) throws {
        guard let f = Self.fields(of: bytes) else {
            throw ProjectionCorruption(place: place(), reason: "device record does not decode (\(bytes.count) bytes)")
        }
        deviceID = f.deviceID.string
        token = f.hasToken ? f.token.string : nil
        tokenTime = f.tokenTime
        rejectedAt = f.rejectedAt
        platform = f.platform == 0 ? nil : Platform(rawValue: f.platform)
        if f.platform != 0 && platform == nil { throw ProjectionCorruption(place: place(), reason: "unknown platform \(f.platform)") }
    }

    /// The fields of a stored record, read in place without building a record.
    struct Fields {
        var live: Bool
        /// Holds a token, live or rejected.
        var hasToken: Bool
        var platform: UInt8
        var tokenTime: Int64
        var rejectedAt: Int64?
        var deviceID: StoredName
        /// Empty text when the device has no token.
        var token: StoredName

        /// Whether the record holds exactly `token` (live or rejected).
        func holds(_ token: UnsafeRawBufferPointer) -> Bool {
            hasToken && self.token.equals(text: token)
        }

        /// Whether the record is the one of `deviceID`.
        func has(deviceID id: UnsafeRawBufferPointer) -> Bool {
            deviceID.equals(text: id)
        }
    }

    /// The length of `f`'s record in the format before schema 4 (names as text).
    static func textFormSize(_ f: Fields) -> Int { 22 + f.deviceID.textCount + (f.hasToken ? f.token.textCount : 0) }

    /// Writes `f`'s record in the format before schema 4, its names as text
    /// (`textFormSize(f)` bytes at `p`): what the recipient cache holds, so a
    /// stream from it copies names in place, as it did before schema 4, and
    /// spells out no hex.
    static func writeTextForm(_ f: Fields, to p: UnsafeMutableRawPointer) {
        p.storeBytes(of: (f.hasToken ? hasTokenFlag : 0) | (f.rejectedAt != nil ? rejectedFlag : 0), as: UInt8.self)
        p.storeBytes(of: f.platform, toByteOffset: 1, as: UInt8.self)
        p.storeBytes(of: UInt64(bitPattern: f.tokenTime).bigEndian, toByteOffset: 2, as: UInt64.self)
        p.storeBytes(of: UInt64(bitPattern: f.rejectedAt ?? 0).bigEndian, toByteOffset: 10, as: UInt64.self)
        let idCount = f.deviceID.textCount, tokenCount = f.hasToken ? f.token.textCount : 0
        p.storeBytes(of: UInt16(idCount).bigEndian, toByteOffset: 18, as: UInt16.self)
        f.deviceID.writeText(to: p + 20)
        p.storeBytes(of: UInt16(tokenCount).bigEndian, toByteOffset: 20 + idCount, as: UInt16.self)
        if f.hasToken { f.token.writeText(to: p + 22 + idCount) }
    }

    /// A record's fields (either format), or nil when the bytes are not one well-formed record.
    @inline(__always)
    static func fields(of b: UnsafeRawBufferPointer) -> Fields? {
        guard b.count >= 10 else { return nil }
        let flags = b[0]
        let tokenTime = Int64(bitPattern: b.loadBigEndian(at: 2, as: UInt64.self))
        if flags & storedNamesFlag == 0 {
            guard b.count >= 22 else { return nil }
            let idLen = Int(b[18]) << 8 | Int(b[19])
            guard b.count >= 22 + idLen else { return nil }
            let tokLen = Int(b[20 + idLen]) << 8 | Int(b[21 + idLen])
            guard b.count == 22 + idLen + tokLen else { return nil }
            return Fields(live: flags & 3 == 1, hasToken: flags & 1 != 0, platform: b[1], tokenTime: tokenTime,
                          rejectedAt: flags & 2 != 0 ? Int64(bitPattern: b.loadBigEndian(at: 10, as: UInt64.self)) : nil,
                          deviceID: StoredName(text: UnsafeRawBufferPointer(rebasing: b[20..<20 + idLen])),
                          token: StoredName(text: UnsafeRawBufferPointer(rebasing: b[(22 + idLen)...])))
        }
        guard flags & ~(hasTokenFlag | rejectedFlag | storedNamesFlag) == 0 else { return nil }
        var at = 10
        var rejectedAt: Int64?
        if flags & rejectedFlag != 0 {
            guard b.count >= 18 else { return nil }
            rejectedAt = Int64(bitPattern: b.loadBigEndian(at: 10, as: UInt64.self))
            at = 18
        }
        guard let id = StoredName.read(b, &at) else { return nil }
        var token = StoredName(text: UnsafeRawBufferPointer(rebasing: b[at..<at]))
        if flags & hasTokenFlag != 0 {
            guard let t = StoredName.read(b, &at) else { return nil }
            token = t
        }
        guard at == b.count else { return nil }
        return Fields(live: flags & 3 == 1, hasToken: flags & 1 != 0, platform: b[1], tokenTime: tokenTime,
                      rejectedAt: rejectedAt, deviceID: id, token: token)
    }
}

/// A topic of a project.
public struct TopicRecord: Sendable, Hashable {
    public var code: String
    public var title: String
    public var single: Bool
    public var subscribers: UInt32
    /// Sequence of the event that created the topic, and of the last one that changed it.
    public var createdSeq: UInt64
    public var lastChangeSeq: UInt64
    /// The 65,536-device slices (high 16 bits of the ordinals) where the topic
    /// has subscribers, ascending: a topic's bitmap is read with one get per slice.
    public var slices: [UInt16] = []

    /// The stored record; without `storingCount` (the compact layout), its subscriber count is stored as 0.
    func encoded(storingCount: Bool = true) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: encodedSize) { buffer, initialized in
            initialized = encode(into: UnsafeMutableRawPointer(buffer.baseAddress!), storingCount: storingCount)
        }
    }

    /// The length of `encoded()`.
    var encodedSize: Int { 29 + code.utf8.count + title.utf8.count + 2 * slices.count }

    /// Writes the encoded record at `p` (which has room for `encodedSize`
    /// bytes) and returns its length: a build writes a million topics, and
    /// appending field by field to an array took most of the write-out's time
    /// for them (as for `DeviceRecord.encode(into:)`).
    func encode(into p: UnsafeMutableRawPointer, storingCount: Bool = true) -> Int {
        p.storeBytes(of: UInt8(single ? 1 : 0), as: UInt8.self)
        p.storeBytes(of: (storingCount ? subscribers : 0).bigEndian, toByteOffset: 1, as: UInt32.self)
        p.storeBytes(of: createdSeq.bigEndian, toByteOffset: 5, as: UInt64.self)
        p.storeBytes(of: lastChangeSeq.bigEndian, toByteOffset: 13, as: UInt64.self)
        var at = 21
        storeString(code, at: p, &at)
        storeString(title, at: p, &at)
        p.storeBytes(of: UInt32(slices.count).bigEndian, toByteOffset: at, as: UInt32.self)
        at += 4
        for s in slices {
            p.storeBytes(of: s.bigEndian, toByteOffset: at, as: UInt16.self)
            at += 2
        }
        return at
    }

    /// The slice list of an encoded record, read in place (a topic's bitmap
    /// needs nothing else) without an array: an audience of 100 per-user topics
    /// allocated one per topic. nil when the bytes do not hold a well-formed
    /// record, which the full decode then reports.
    static func storedSlices(of b: UnsafeRawBufferPointer) -> StoredSlices? {
        var at = 21
        for _ in 0..<2 {  // code, title
            guard b.count >= at + 2 else { return nil }
            at += 2 + (Int(b[at]) << 8 | Int(b[at + 1]))
        }
        guard b.count >= at + 4 else { return nil }
        let n = Int(b.loadBigEndian(at: at, as: UInt32.self))
        at += 4
        guard n <= 65_536, b.count - at == 2 * n else { return nil }
        return StoredSlices(bytes: UnsafeRawBufferPointer(rebasing: b[at...]))
    }

    /// A record's slices where they are stored (big-endian u16s), valid while those bytes are.
    struct StoredSlices: Sequence {
        let bytes: UnsafeRawBufferPointer
        var count: Int { bytes.count / 2 }

        func makeIterator() -> Iterator { Iterator(bytes: bytes) }

        struct Iterator: IteratorProtocol {
            let bytes: UnsafeRawBufferPointer
            var at = 0
            mutating func next() -> UInt16? {
                guard at + 2 <= bytes.count else { return nil }
                defer { at += 2 }
                return bytes.loadBigEndian(at: at, as: UInt16.self)
            }
        }
    }

    init(code: String, title: String, single: Bool, subscribers: UInt32, createdSeq: UInt64, lastChangeSeq: UInt64) {
        self.code = code
        self.title = title
        self.single = single
        self.subscribers = subscribers
        self.createdSeq = createdSeq
        self.lastChangeSeq = lastChangeSeq
    }

    init(decoding bytes: UnsafeRawBufferPointer, at place: @autoclosure () -> String) throws {
        do {
            var r = ByteReader(bytes)
            single = try r.u8() != 0
            subscribers = try r.u32()
            createdSeq = try r.u64()
            lastChangeSeq = try r.u64()
            code = try r.string()
            title = try r.string()
            let n = Int(try r.u32())
            guard n <= 65_536, r.remaining == n * 2 else {
                throw ProjectionCorruption(place: place(), reason: "slice list of \(n) entries in \(r.remaining) bytes")
            }
            slices.reserveCapacity(n)
            for _ in 0..<n { slices.append(try r.u16()) }
        } catch let e as ProjectionCorruption {
            throw e
        } catch {
            throw ProjectionCorruption(place: place(), reason: "topic record does not decode: \(error)")
        }
    }
}

/// A project's identity and counters: ordinals are dense, and neither
/// ordinals nor topic ids are ever reused (topic ids come from `nextTopicID`,
/// with the high bit set for single topics: see `ProjectionTables.TopicLayout`).
public struct ProjectRecord: Sendable, Hashable {
    public var id: UInt32
    public var nextOrdinal: UInt32
    public var nextTopicID: UInt32

    func encoded() -> [UInt8] {
        var w = ByteWriter(capacity: 12)
        w.u32(id); w.u32(nextOrdinal); w.u32(nextTopicID)
        return w.bytes
    }

    init(id: UInt32, nextOrdinal: UInt32, nextTopicID: UInt32) {
        self.id = id
        self.nextOrdinal = nextOrdinal
        self.nextTopicID = nextTopicID
    }

    public init(decoding bytes: UnsafeRawBufferPointer, at place: @autoclosure () -> String) throws {
        guard bytes.count == 12 else {
            throw ProjectionCorruption(place: place(), reason: "project record of \(bytes.count) bytes (expected 12)")
        }
        id = bytes.loadBigEndian(at: 0)
        nextOrdinal = bytes.loadBigEndian(at: 4)
        nextTopicID = bytes.loadBigEndian(at: 8)
    }
}

/// A projection value that cannot be trusted, with the table and key where it is.
public struct ProjectionCorruption: Error, Sendable, CustomStringConvertible {
    public let place: String
    public let reason: String
    public init(place: String, reason: String) {
        self.place = place
        self.reason = reason
    }
    public var description: String { "corrupt projection at \(place): \(reason)" }
}

/// Writes `s` at `p + at` as the records' strings are encoded (u16 big-endian
/// length, then the UTF-8 bytes, as `ByteWriter.string` appends them) and
/// moves `at` past it. `p` must have room.
@inline(__always)
func storeString(_ s: String, at p: UnsafeMutableRawPointer, _ at: inout Int) {
    let offset = at
    let written = s.withUTF8Bytes { utf8 -> Int in
        precondition(utf8.count <= Int(UInt16.max), "string too long for the record format")
        p.storeBytes(of: UInt16(utf8.count).bigEndian, toByteOffset: offset, as: UInt16.self)
        if utf8.count > 0 { (p + offset + 2).copyMemory(from: utf8.baseAddress!, byteCount: utf8.count) }
        return 2 + utf8.count
    }
    at += written
}
