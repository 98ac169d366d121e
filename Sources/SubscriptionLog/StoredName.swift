import CIntrinsics
import Glibc

/// A device_id or a token as a log record (version 3) or a device record
/// (schema 4) holds it: as its UTF-8 text, or, when the text has a shape that push tokens and SDK device
/// ids nearly always have, in fewer bytes that give back exactly that text:
///
/// - an even number of hex digits, every letter lowercase (or every letter
///   uppercase): an APNs token, 64 characters, as the 32 bytes they spell;
/// - a UUID in its 8-4-4-4-12 form, every letter lowercase (or uppercase):
///   the MPush SDKs' device_id, 36 characters, as its 16 bytes;
/// - base64url characters (A-Z a-z 0-9 - _) with at most one colon, up to
///   255 of them: an FCM registration token, `<instance id>:APA91b…` in 163
///   characters, as 6 bits a character (125 bytes instead of 166). Written
///   since schema 7; a store of an earlier schema holds none.
///
/// Anything else (mixed case, other characters, an odd length) stays text,
/// so every text comes back byte for byte. Stored as
///
/// ```
/// u8 form ‖ text: u16 length, UTF-8 | hex: u8 byte count, bytes | uuid: 16 bytes
///         | token64: u8 length, u8 colon index (255: none), the other characters' 6-bit values
/// ```
package struct StoredName {
    package enum Form: UInt8, Sendable {
        case text = 0, lowerHex = 1, upperHex = 2, lowerUUID = 3, upperUUID = 4, token64 = 5
    }

    package let form: Form
    /// The stored bytes after the form and length (for `token64`, after the form: the length and colon index first).
    package let payload: UnsafeRawBufferPointer

    /// A name held as text (in a record of schema 3 or earlier, always).
    package init(text: UnsafeRawBufferPointer) {
        form = .text
        payload = text
    }

    @usableFromInline init(form: Form, payload: UnsafeRawBufferPointer) {
        self.form = form
        self.payload = payload
    }

    /// The longest hex text stored as bytes (a u8 byte count); a longer one is stored as text.
    @inlinable package static var maximumHexBytes: Int { 255 }

    /// The longest text stored in the 6-bit form (a u8 length).
    @inlinable package static var maximumToken64Count: Int { 255 }
    /// The colon index a 6-bit name stores when it has no colon.
    @inlinable static var noColon: UInt8 { 255 }

    /// The length of the text the name stands for.
    @inlinable package var textCount: Int {
        switch form {
        case .text: payload.count
        case .lowerHex, .upperHex: 2 * payload.count
        case .lowerUUID, .upperUUID: 36
        case .token64: Int(payload[0])
        }
    }

    /// The bytes a 6-bit name of `symbols` characters packs them into.
    @inlinable static func token64Bytes(symbols: Int) -> Int { (6 * symbols + 7) / 8 }

    // MARK: Writing

    /// How `text` is stored and how many bytes that takes, form byte included.
    package static func plan(_ text: UnsafeRawBufferPointer) -> (form: Form, size: Int) {
        if text.count == 36, let upper = hexCase(text, uuid: true) { return (upper ? .upperUUID : .lowerUUID, 17) }
        if text.count > 0, text.count % 2 == 0, text.count / 2 <= maximumHexBytes, let upper = hexCase(text, uuid: false) {
            return (upper ? .upperHex : .lowerHex, 2 + text.count / 2)
        }
        // Smaller than its text from four characters on.
        if text.count >= 4, text.count <= maximumToken64Count {
            let colon = topicstore_token64_colon(text.baseAddress!, text.count)
            if colon >= 0 { return (.token64, 3 + token64Bytes(symbols: colon < text.count ? text.count - 1 : text.count)) }
        }
        return (.text, 3 + text.count)
    }

    package static func plan(_ text: String) -> (form: Form, size: Int) {
        text.withUTF8Bytes { plan($0) }
    }

    /// Writes `text` in `form` (from `plan`) at `p + at` and advances `at`.
    package static func write(_ text: String, _ form: Form, at p: UnsafeMutableRawPointer, _ at: inout Int) {
        text.withUTF8Bytes { write(utf8: $0, form, at: p, &at) }
    }

    /// Writes the text `t` (UTF-8) in `form` (from `plan`) at `p + at` and advances `at`.
    package static func write(utf8 t: UnsafeRawBufferPointer, _ form: Form, at p: UnsafeMutableRawPointer, _ at: inout Int) {
        p.storeBytes(of: form.rawValue, toByteOffset: at, as: UInt8.self)
        at += 1
        switch form {
        case .text:
            precondition(t.count <= Int(UInt16.max), "string too long for the record format")
            p.storeBytes(of: UInt16(t.count).bigEndian, toByteOffset: at, as: UInt16.self)
            if t.count > 0 { (p + at + 2).copyMemory(from: t.baseAddress!, byteCount: t.count) }
            at += 2 + t.count
        case .lowerHex, .upperHex:
            p.storeBytes(of: UInt8(t.count / 2), toByteOffset: at, as: UInt8.self)
            at += 1
            if t.count > 0 { topicstore_pack_hex(t.baseAddress!, t.count, p + at) }
            at += t.count / 2
        case .lowerUUID, .upperUUID:
            precondition(t.count == 36, "a UUID form for a text that is no UUID")
            topicstore_pack_uuid(t.baseAddress!, p + at)
            at += 16
        case .token64:
            // `plan` checked the shape: only the colon is looked for again.
            precondition(t.count >= 1 && t.count <= maximumToken64Count, "a 6-bit form for a text of another length")
            let colon = memchr(t.baseAddress!, Int32(UInt8(ascii: ":")), t.count).map { $0 - UnsafeMutableRawPointer(mutating: t.baseAddress!) } ?? t.count
            let hasColon = colon < t.count
            p.storeBytes(of: UInt8(t.count), toByteOffset: at, as: UInt8.self)
            p.storeBytes(of: hasColon ? UInt8(colon) : noColon, toByteOffset: at + 1, as: UInt8.self)
            topicstore_pack_token64(t.baseAddress!, t.count, Int(colon), p + at + 2)
            at += 2 + token64Bytes(symbols: hasColon ? t.count - 1 : t.count)
        }
    }

    /// nil: not hex digits (in a UUID's 8-4-4-4-12 groups when `uuid`, which
    /// then has 36 bytes); else whether its letters are uppercase (false when
    /// it has none). In C, 16 bytes a step (`topicstore_hex_case`).
    private static func hexCase(_ t: UnsafeRawBufferPointer, uuid: Bool) -> Bool? {
        guard let base = t.baseAddress else { return uuid ? nil : false }
        let c = uuid ? topicstore_uuid_case(base) : topicstore_hex_case(base, t.count)
        return c == 0 ? nil : c == 2
    }

    // MARK: Reading

    /// The name stored at `at` in `b` (advancing `at` past it); nil when it does not fit or has an unknown form.
    @inlinable
    package static func read(_ b: UnsafeRawBufferPointer, _ at: inout Int) -> StoredName? {
        guard at < b.count, let form = Form(rawValue: b[at]) else { return nil }
        var start = at + 1
        let length: Int
        switch form {
        case .text:
            guard b.count >= start + 2 else { return nil }
            length = Int(b[start]) << 8 | Int(b[start + 1])
            start += 2
        case .lowerHex, .upperHex:
            guard b.count >= start + 1 else { return nil }
            length = Int(b[start])
            start += 1
        case .lowerUUID, .upperUUID:
            length = 16
        case .token64:
            // The payload starts at the length: [length, colon, packed…].
            guard b.count >= start + 2 else { return nil }
            let n = Int(b[start]), colon = b[start + 1]
            guard colon == noColon || Int(colon) < n else { return nil }
            length = 2 + token64Bytes(symbols: colon == noColon ? n : n - 1)
        }
        guard b.count >= start + length else { return nil }
        at = start + length
        return StoredName(form: form, payload: UnsafeRawBufferPointer(rebasing: b[start..<start + length]))
    }

    /// Writes the text (`textCount` bytes) at `p`.
    @inlinable package func writeText(to p: UnsafeMutableRawPointer) {
        switch form {
        case .text:
            if payload.count > 0 { p.copyMemory(from: payload.baseAddress!, byteCount: payload.count) }
        case .lowerHex, .upperHex:
            topicstore_spell_hex(payload.baseAddress, payload.count, p, form == .upperHex ? 1 : 0)
        case .lowerUUID, .upperUUID:
            // The 32 digits, then 8-4-4-4-12 with the dashes between.
            var digits: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
            withUnsafeMutableBytes(of: &digits) { t in
                topicstore_spell_hex(payload.baseAddress, 16, t.baseAddress, form == .upperUUID ? 1 : 0)
                let d = t.baseAddress!
                p.copyMemory(from: d, byteCount: 8)
                (p + 9).copyMemory(from: d + 8, byteCount: 4)
                (p + 14).copyMemory(from: d + 12, byteCount: 4)
                (p + 19).copyMemory(from: d + 16, byteCount: 4)
                (p + 24).copyMemory(from: d + 20, byteCount: 12)
            }
            p.storeBytes(of: 0x2D as UInt8, toByteOffset: 8, as: UInt8.self)
            p.storeBytes(of: 0x2D as UInt8, toByteOffset: 13, as: UInt8.self)
            p.storeBytes(of: 0x2D as UInt8, toByteOffset: 18, as: UInt8.self)
            p.storeBytes(of: 0x2D as UInt8, toByteOffset: 23, as: UInt8.self)
        case .token64:
            let n = Int(payload[0]), colon = payload[1]
            topicstore_spell_token64(payload.baseAddress! + 2, colon == Self.noColon ? n : n - 1,
                                     colon == Self.noColon ? Int.max : Int(colon), p)
        }
    }

    /// The longest text a name stored in fewer bytes spells (hex of 255 bytes; a 6-bit name spells at most 255).
    @inlinable package static var longestSpelled: Int { 2 * maximumHexBytes }

    /// The text: in place when stored as text, else spelled out at `scratch`
    /// (room for `longestSpelled` bytes) — for loops over many names, which
    /// reuse one buffer instead of a closure per name.
    @inlinable @inline(__always)
    package func text(spellingInto scratch: UnsafeMutableRawPointer) -> UnsafeRawBufferPointer {
        if form == .text { return payload }
        writeText(to: scratch)
        return UnsafeRawBufferPointer(start: scratch, count: textCount)
    }

    /// Calls `body` with the text: in place when stored as text, else spelled out in a temporary buffer.
    @inlinable @inline(__always)
    package func withText<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        if form == .text { return try body(payload) }
        return try withUnsafeTemporaryAllocation(byteCount: textCount, alignment: 1) { buffer in
            writeText(to: buffer.baseAddress!)
            return try body(UnsafeRawBufferPointer(buffer))
        }
    }

    /// The text as a String.
    @inlinable package var string: String { withText { String(decodingLogText: $0) } }

    /// Whether the name stands for `text`.
    @inlinable package func equals(text: UnsafeRawBufferPointer) -> Bool {
        guard textCount == text.count else { return false }
        if form == .text {
            return text.isEmpty || memcmp(payload.baseAddress!, text.baseAddress!, text.count) == 0
        }
        return withText { memcmp($0.baseAddress!, text.baseAddress!, text.count) == 0 }
    }

    /// Whether both names stand for the same text (a store written before
    /// schema 4 may hold one as text and the other in fewer bytes).
    @inlinable package func equals(_ other: StoredName) -> Bool {
        if form == other.form {
            return payload.count == other.payload.count
                && (payload.isEmpty || memcmp(payload.baseAddress!, other.payload.baseAddress!, payload.count) == 0)
        }
        return other.withText { equals(text: $0) }
    }
}
