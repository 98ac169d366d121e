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

    // u8 flags (1 token, 2 rejected) ‖ u8 platform ‖ i64 tokenTime ‖ i64 rejectedAt ‖ str deviceID ‖ str token
    func encoded() -> [UInt8] {
        let size = encodedSize
        return [UInt8](unsafeUninitializedCapacity: size) { buffer, initialized in
            initialized = encode(into: UnsafeMutableRawPointer(buffer.baseAddress!))
        }
    }

    /// The length of `encoded()`.
    var encodedSize: Int { 22 + deviceID.utf8.count + (token?.utf8.count ?? 0) }

    /// Writes the encoded record at `p` (which has room for `encodedSize`
    /// bytes) and returns its length: a build encodes a million devices back
    /// to back into one buffer, without an array or a bounds check per field.
    func encode(into p: UnsafeMutableRawPointer) -> Int {
        var flags: UInt8 = 0
        if token != nil { flags |= 1 }
        if rejectedAt != nil { flags |= 2 }
        p.storeBytes(of: flags, as: UInt8.self)
        p.storeBytes(of: platform?.rawValue ?? 0, toByteOffset: 1, as: UInt8.self)
        p.storeBytes(of: UInt64(bitPattern: tokenTime).bigEndian, toByteOffset: 2, as: UInt64.self)
        p.storeBytes(of: UInt64(bitPattern: rejectedAt ?? 0).bigEndian, toByteOffset: 10, as: UInt64.self)
        var at = 18
        storeString(deviceID, at: p, &at)
        storeString(token ?? "", at: p, &at)
        return at
    }

    init(decoding bytes: UnsafeRawBufferPointer, at place: @autoclosure () -> String) throws {
        do {
            var r = ByteReader(bytes)
            let flags = try r.u8()
            let platformByte = try r.u8()
            tokenTime = try r.i64()
            let rejected = try r.i64()
            deviceID = try r.string()
            let token = try r.string()
            self.token = flags & 1 != 0 ? token : nil
            rejectedAt = flags & 2 != 0 ? rejected : nil
            platform = platformByte == 0 ? nil : Platform(rawValue: platformByte)
            if platformByte != 0 && platform == nil { throw ProjectionCorruption(place: place(), reason: "unknown platform \(platformByte)") }
        } catch let e as ProjectionCorruption {
            throw e
        } catch {
            throw ProjectionCorruption(place: place(), reason: "device record does not decode: \(error)")
        }
    }

    /// The fields a token stream needs, read in place without building a record.
    struct Fields {
        var live: Bool
        /// Holds a token, live or rejected.
        var hasToken: Bool
        var platform: UInt8
        var deviceID: UnsafeRawBufferPointer
        var token: UnsafeRawBufferPointer

        /// Whether the record holds exactly `token` (live or rejected).
        func holds(_ token: UnsafeRawBufferPointer) -> Bool {
            hasToken && self.token.count == token.count
                && (token.isEmpty || memcmp(self.token.baseAddress!, token.baseAddress!, token.count) == 0)
        }

        /// Whether the record is the one of `deviceID`.
        func has(deviceID id: UnsafeRawBufferPointer) -> Bool {
            deviceID.count == id.count && (id.isEmpty || memcmp(deviceID.baseAddress!, id.baseAddress!, id.count) == 0)
        }
    }

    @inline(__always)
    static func fields(of b: UnsafeRawBufferPointer) -> Fields? {
        guard b.count >= 22 else { return nil }
        let idLen = Int(b[18]) << 8 | Int(b[19])
        guard b.count >= 22 + idLen else { return nil }
        let tokLen = Int(b[20 + idLen]) << 8 | Int(b[21 + idLen])
        guard b.count == 22 + idLen + tokLen else { return nil }
        return Fields(live: b[0] & 3 == 1, hasToken: b[0] & 1 != 0, platform: b[1],
                      deviceID: UnsafeRawBufferPointer(rebasing: b[20..<20 + idLen]),
                      token: UnsafeRawBufferPointer(rebasing: b[(22 + idLen)...]))
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
    /// needs nothing else); nil when the bytes do not hold a well-formed
    /// record, which the full decode then reports.
    static func slices(of b: UnsafeRawBufferPointer) -> [UInt16]? {
        var at = 21
        for _ in 0..<2 {  // code, title
            guard b.count >= at + 2 else { return nil }
            at += 2 + (Int(b[at]) << 8 | Int(b[at + 1]))
        }
        guard b.count >= at + 4 else { return nil }
        let n = Int(b.loadBigEndian(at: at, as: UInt32.self))
        at += 4
        guard n <= 65_536, b.count - at == 2 * n else { return nil }
        guard n > 0 else { return [] }  // an empty array's initializer would write to the shared empty storage
        return [UInt16](unsafeUninitializedCapacity: n) { buffer, initialized in
            for i in 0..<n { buffer[i] = b.loadBigEndian(at: at + 2 * i, as: UInt16.self) }
            initialized = n
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
    var s = s
    let offset = at
    let written = s.withUTF8 { utf8 -> Int in
        precondition(utf8.count <= Int(UInt16.max), "string too long for the record format")
        p.storeBytes(of: UInt16(utf8.count).bigEndian, toByteOffset: offset, as: UInt16.self)
        if utf8.count > 0 { (p + offset + 2).copyMemory(from: utf8.baseAddress!, byteCount: utf8.count) }
        return 2 + utf8.count
    }
    at += written
}
