/// Appends big-endian integers and length-prefixed strings to a byte array.
public struct ByteWriter {
    public private(set) var bytes: [UInt8]
    public init(capacity: Int = 128) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    public mutating func u8(_ v: UInt8) { bytes.append(v) }
    public mutating func u16(_ v: UInt16) { bytes.append(UInt8(v >> 8)); bytes.append(UInt8(v & 0xFF)) }
    public mutating func u32(_ v: UInt32) {
        withUnsafeBytes(of: v.bigEndian) { bytes.append(contentsOf: $0) }
    }
    public mutating func u64(_ v: UInt64) {
        withUnsafeBytes(of: v.bigEndian) { bytes.append(contentsOf: $0) }
    }
    public mutating func i64(_ v: Int64) { u64(UInt64(bitPattern: v)) }
    /// A string as u16 length and UTF-8 bytes. Validated strings are far shorter than
    /// 64 KiB; a longer one is refused with `field` (the API's name for it), never a trap:
    /// a gap in validation must cost one command, not the process.
    public mutating func string(_ s: String, field: @autoclosure () -> String) throws(FieldTooLong) {
        let n = s.utf8.count
        guard n <= FieldTooLong.limit else { throw FieldTooLong(field: field(), bytes: n) }
        s.withUTF8Bytes { utf8 in
            u16(UInt16(truncatingIfNeeded: utf8.count))
            bytes.append(contentsOf: utf8)
        }
    }
    public mutating func raw(_ b: UnsafeRawBufferPointer) { bytes.append(contentsOf: b) }
    public mutating func raw(_ b: [UInt8]) { bytes.append(contentsOf: b) }
}

/// A string or list too long for its u16 length field.
public struct FieldTooLong: Error, Sendable, Hashable, CustomStringConvertible {
    /// The most a u16 length says: bytes of a string, items of a list.
    public static let limit = Int(UInt16.max)
    /// The field as the API names it (`topics.0.title`, `reason`).
    public let field: String
    /// Its length: bytes of UTF-8, or items when `isCount`.
    public let bytes: Int
    public let isCount: Bool
    public init(field: String, bytes: Int, isCount: Bool = false) {
        self.field = field
        self.bytes = bytes
        self.isCount = isCount
    }
    /// What is wrong, without the field's name (a `ValidationError`'s message).
    public var message: String {
        "Too long for a log record: \(bytes) \(isCount ? "items" : "bytes"), at most \(Self.limit)."
    }
    public var description: String { "\(field): \(message)" }
}

/// Reads what `ByteWriter` wrote, with a bounds check on every read.
public struct ByteReader {
    public struct OutOfBounds: Error {
        public let offset: Int
        public let wanted: Int
    }
    /// A field in a form its encoding never writes (a short length behind the escape that fits in one byte).
    public struct Malformed: Error {
        public let offset: Int
        public let reason: String
    }

    public let buffer: UnsafeRawBufferPointer
    public private(set) var offset: Int = 0

    public init(_ buffer: UnsafeRawBufferPointer) { self.buffer = buffer }

    public var remaining: Int { buffer.count - offset }

    @inline(__always)
    private mutating func take(_ n: Int) throws(OutOfBounds) -> Int {
        guard n <= buffer.count - offset else { throw OutOfBounds(offset: offset, wanted: n) }
        defer { offset += n }
        return offset
    }

    public mutating func u8() throws(OutOfBounds) -> UInt8 { buffer[try take(1)] }
    public mutating func u16() throws(OutOfBounds) -> UInt16 {
        let at = try take(2)
        return UInt16(buffer[at]) << 8 | UInt16(buffer[at + 1])
    }
    public mutating func u32() throws(OutOfBounds) -> UInt32 {
        UInt32(bigEndian: buffer.loadUnaligned(fromByteOffset: try take(4), as: UInt32.self))
    }
    public mutating func u64() throws(OutOfBounds) -> UInt64 {
        UInt64(bigEndian: buffer.loadUnaligned(fromByteOffset: try take(8), as: UInt64.self))
    }
    public mutating func i64() throws(OutOfBounds) -> Int64 { Int64(bitPattern: try u64()) }
    public mutating func bytes(_ n: Int) throws(OutOfBounds) -> UnsafeRawBufferPointer {
        let at = try take(n)
        return UnsafeRawBufferPointer(rebasing: buffer[at..<at + n])
    }
    /// A `StoredName` (what `StoredName.write` wrote), where it lies. The caller
    /// checks the form byte (an unknown one is corruption, not a short field); a
    /// name that runs past the end is thrown as out of bounds.
    mutating func storedName() throws(OutOfBounds) -> StoredName {
        var at = offset
        guard let stored = StoredName.read(buffer, &at) else {
            throw OutOfBounds(offset: offset, wanted: buffer.count - offset + 1)
        }
        offset = at
        return stored
    }
    /// A u16-length-prefixed string; invalid UTF-8 is repaired, never trusted blindly.
    @inline(__always)
    public mutating func string() throws(OutOfBounds) -> String {
        let n = Int(try u16())
        return String(decodingLogText: try bytes(n))
    }
    /// A big-endian u48 (a version 4 record's timestamp).
    public mutating func u48() throws(OutOfBounds) -> UInt64 { buffer.loadBigEndianU48(at: try take(6)) }
    /// A `ShortLength`: one byte, or the escape and a u16 of at least the escape.
    public mutating func shortLength() throws -> Int {
        let at = offset
        let first = try u8()
        guard first == ShortLength.escape else { return Int(first) }
        let n = Int(try u16())
        guard n >= Int(ShortLength.escape) else { throw Malformed(offset: at, reason: "length \(n) written in three bytes") }
        return n
    }
    /// A string with a `ShortLength` (version 4); invalid UTF-8 is repaired.
    /// A one-byte length whose bytes are all there (every topic code and
    /// project name of a record) is read here in a few instructions; anything
    /// else, the errors included, by `shortStringSlowly`.
    @inline(__always)
    public mutating func shortString() throws -> String {
        let at = offset
        if at < buffer.count {
            let n = Int(buffer.load(fromByteOffset: at, as: UInt8.self))
            if n < Int(ShortLength.escape), n < buffer.count &- at {
                offset = at &+ 1 &+ n
                return String(decodingLogText: UnsafeRawBufferPointer(start: buffer.baseAddress! + at + 1, count: n))
            }
        }
        return try shortStringSlowly()
    }

    /// `shortString` read field by field: a three-byte length, or a string
    /// that runs past the end (thrown as before).
    @inline(never)
    mutating func shortStringSlowly() throws -> String {
        let n = try shortLength()
        return String(decodingLogText: try bytes(n))
    }
}

extension UnsafeRawBufferPointer {
    /// A big-endian integer at `offset` (bounds checked by the caller's length check).
    @inlinable @inline(__always)
    public func loadBigEndian<T: FixedWidthInteger>(at offset: Int, as: T.Type = T.self) -> T {
        T(bigEndian: loadUnaligned(fromByteOffset: offset, as: T.self))
    }

    /// A big-endian u48 at `offset` (a version 4 record's timestamp; bounds checked by the caller).
    @inlinable @inline(__always)
    public func loadBigEndianU48(at offset: Int) -> UInt64 {
        UInt64(loadBigEndian(at: offset, as: UInt16.self)) << 32 | UInt64(loadBigEndian(at: offset + 2, as: UInt32.self))
    }
}
