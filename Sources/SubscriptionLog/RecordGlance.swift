/// What a log record names — its type, device_id, token and topic codes —
/// read where the record lies, without decoding it: no strings are made.
///
/// A scan for one device or one topic (`History`) decodes only the records
/// that name it. Decoding every record made two or three heap strings and an
/// array each, and was more than half of a device's history on bench's 1M
/// store (2.1 s against 0.85 s for the same scan decoding nothing).
///
/// Only the parse is done here: a glance is made of a record whose frame (its
/// checksum) a caller has checked, and it reads every field `RecordCodec.decode`
/// reads, with the same bounds, so a record a glance reads is one `decode`
/// reads. Where a glance cannot tell a name for certain — a name stored as
/// text that is not valid UTF-8, which `decode` repairs — it answers that the
/// record may name it, and the caller decodes the record.
public struct RecordGlance {
    public enum Kind: UInt8, Sendable, CaseIterable {
        case token = 1, register = 2, unregister = 3, unregisterAll = 4, tokenRejected = 5
        case forgetDevice = 6, dropTopic = 7, expireToken = 8
    }

    public let kind: Kind
    /// The record's fields: every byte before its chain link (or, in version 1, its CRC).
    private let fields: UnsafeRawBufferPointer
    /// Version 3 and 4 store device_ids and tokens as `StoredName`s; 1 and 2 as strings.
    private let storesNames: Bool
    /// Version 4 has short lengths (`ShortLength`); the versions before it u16 ones.
    private let compact: Bool
    /// Where the device_id starts (nil: the type names none).
    private let deviceAt: Int?
    /// Where the token starts (token, token-rejected and expire-token).
    private let tokenAt: Int?
    /// Where the topic codes start: a register's or an unregister's list (its
    /// first item, after the count), a drop-topic's code.
    private let codesAt: Int?
    private let codeCount: Int

    /// A glance at `record` (its stored bytes, frame checked); nil when its
    /// fields do not parse (of an unknown version or type, a field past the end,
    /// trailing bytes, an unknown name form or platform): `decode` then says
    /// where and why.
    public init?(_ record: UnsafeRawBufferPointer) {
        guard let version = record.first else { return nil }
        let trailer: Int
        switch version {
        case RecordCodec.legacyVersion: trailer = 4
        case RecordCodec.chainedVersions: trailer = RecordCodec.trailerSize(version)
        default: return nil
        }
        guard record.count >= trailer + 2 else { return nil }
        var p = Parse(fields: UnsafeRawBufferPointer(rebasing: record[0..<record.count - trailer]),
                      storesNames: version >= 3, compact: RecordCodec.isCompact(version))
        guard let kind = Kind(rawValue: record[1]) else { return nil }
        // version, type, then a u48 timestamp (4) or a u64 sequence and an i64 timestamp.
        p.at = p.compact ? 8 : 18
        guard p.string() != nil else { return nil }  // the project
        var deviceAt: Int?, tokenAt: Int?, codesAt: Int?, codeCount = 0
        switch kind {
        case .token:
            deviceAt = p.name()
            tokenAt = p.name()
            guard deviceAt != nil, tokenAt != nil, let platform = p.byte(), Platform(rawValue: platform) != nil else { return nil }
        case .register:
            deviceAt = p.name()
            guard deviceAt != nil, let n = p.count() else { return nil }
            codesAt = p.at
            codeCount = n
            for _ in 0..<n {
                guard p.string() != nil, let flags = p.byte() else { return nil }
                if flags & 1 != 0 { guard p.string() != nil else { return nil } }
            }
        case .unregister:
            deviceAt = p.name()
            guard deviceAt != nil, let n = p.count() else { return nil }
            codesAt = p.at
            codeCount = n
            for _ in 0..<n { guard p.string() != nil else { return nil } }
        case .unregisterAll, .forgetDevice:
            deviceAt = p.name()
            guard deviceAt != nil else { return nil }
        case .tokenRejected:
            tokenAt = p.name()
            guard tokenAt != nil, p.skip(8), p.string() != nil else { return nil }
        case .expireToken:
            tokenAt = p.name()
            guard tokenAt != nil else { return nil }
        case .dropTopic:
            codesAt = p.at
            codeCount = 1
            guard p.string() != nil else { return nil }
        }
        guard p.at == p.fields.count else { return nil }
        self.kind = kind
        self.fields = p.fields
        self.storesNames = p.storesNames
        self.compact = p.compact
        self.deviceAt = deviceAt
        self.tokenAt = tokenAt
        self.codesAt = codesAt
        self.codeCount = codeCount
    }

    /// Whether the record may name the device `deviceID` (its UTF-8): false
    /// only when it certainly does not.
    public func mayName(deviceID: UnsafeRawBufferPointer) -> Bool {
        guard let deviceAt else { return false }
        return nameMayBe(at: deviceAt, deviceID)
    }

    /// Whether the record may name the push token `token` (its UTF-8).
    public func mayName(token: UnsafeRawBufferPointer) -> Bool {
        guard let tokenAt else { return false }
        return nameMayBe(at: tokenAt, token)
    }

    /// Whether the record may name the topic `code` (its UTF-8): in a
    /// register's topics, an unregister's codes, or as the topic a drop-topic drops.
    public func mayName(topic code: UnsafeRawBufferPointer) -> Bool {
        guard let codesAt else { return false }
        var p = Parse(fields: fields, storesNames: storesNames, compact: compact)
        p.at = codesAt
        for _ in 0..<codeCount {
            // Parsed once by `init`: these reads cannot fail.
            guard let text = p.string() else { return true }
            if Self.textMayBe(text, code) { return true }
            if kind == .register, let flags = p.byte(), flags & 1 != 0 { _ = p.string() }
        }
        return false
    }

    /// The token's text (token, token-rejected and expire-token), as `decode` gives it.
    public var token: String? {
        guard let tokenAt else { return nil }
        if storesNames {
            var at = tokenAt
            return StoredName.read(fields, &at)?.string
        }
        var p = Parse(fields: fields, storesNames: false, compact: compact)
        p.at = tokenAt
        return p.string().map { String(decoding: $0, as: UTF8.self) }
    }

    private func nameMayBe(at offset: Int, _ text: UnsafeRawBufferPointer) -> Bool {
        if storesNames {
            var at = offset
            guard let stored = StoredName.read(fields, &at) else { return true }
            guard stored.form == .text else { return stored.equals(text: text) }
            return Self.textMayBe(stored.payload, text)
        }
        var p = Parse(fields: fields, storesNames: false, compact: compact)
        p.at = offset
        guard let stored = p.string() else { return true }
        return Self.textMayBe(stored, text)
    }

    /// Whether stored text decodes to `text`: its bytes are `text`'s, or they
    /// are not valid UTF-8, which `decode` repairs (then only a decode can tell).
    private static func textMayBe(_ stored: UnsafeRawBufferPointer, _ text: UnsafeRawBufferPointer) -> Bool {
        if stored.count == text.count, stored.elementsEqual(text) { return true }
        if !stored.contains(where: { $0 >= 0x80 }) { return false }
        return String(validating: stored, as: UTF8.self) == nil
    }

    /// Reads the fields as `RecordCodec.decode` does, each read bounds-checked:
    /// nil when a field runs past the end.
    private struct Parse {
        let fields: UnsafeRawBufferPointer
        let storesNames: Bool
        let compact: Bool
        var at = 0

        mutating func skip(_ n: Int) -> Bool {
            guard n <= fields.count - at else { return false }
            at += n
            return true
        }

        mutating func byte() -> UInt8? {
            guard at < fields.count else { return nil }
            defer { at += 1 }
            return fields[at]
        }

        /// A list length or a string length: a `ShortLength` (4) or a u16.
        mutating func count() -> Int? {
            guard compact else {
                guard at + 2 <= fields.count else { return nil }
                defer { at += 2 }
                return Int(fields[at]) << 8 | Int(fields[at + 1])
            }
            guard let first = byte() else { return nil }
            guard first == ShortLength.escape else { return Int(first) }
            guard at + 2 <= fields.count else { return nil }
            let n = Int(fields[at]) << 8 | Int(fields[at + 1])
            at += 2
            return n >= Int(ShortLength.escape) ? n : nil
        }

        /// A string's bytes.
        mutating func string() -> UnsafeRawBufferPointer? {
            guard let n = count(), n <= fields.count - at else { return nil }
            defer { at += n }
            return UnsafeRawBufferPointer(rebasing: fields[at..<at + n])
        }

        /// A device_id or a token: where it starts, after passing over it.
        mutating func name() -> Int? {
            let start = at
            guard storesNames else { return string() == nil ? nil : start }
            guard StoredName.read(fields, &at) != nil else { return nil }
            return start
        }
    }
}
