/// The binary form of a log record, version 3 (hash-chained):
///
/// ```
/// u8  version (3)        u8  type
/// u64 sequence           i64 timestamp (ms since 1970)
/// str project            ...type-specific fields...
/// [32] chain link = SHA-256(previous record's link ‖ every byte before this field)
/// u32 CRC-32C of every byte before it
/// ```
/// Integers are big-endian; `str` is a u16 length and UTF-8 bytes; a device_id
/// or a token is a `StoredName` (a UUID in 16 bytes, a run of hex digits in half
/// its length, an FCM-shaped token in 6 bits a character since schema 7, anything
/// else as text). The first record's previous link is
/// `ChainHash.genesis` (32 zero bytes).
///
/// The chain link is computed over the record's version 2 form: the same
/// fields with version byte 2 and every name as `str`. So the chain commits to
/// the events, not to how they are stored: a log of version 2 records, one of
/// version 3 records, and an export of either imported again give the same
/// links and the same head.
///
/// Version 2 is that form itself; it still decodes and verifies, and is
/// written only to re-encode a version 2 record (an archive's verification).
/// Version 1 is version 2 without the chain link; it still decodes (it
/// carries no link, so an audit reports it as unchained) but is never written.
public enum RecordCodec {
    public static let currentVersion: UInt8 = 3
    /// The versions that carry a chain link.
    public static let chainedVersions: ClosedRange<UInt8> = 2...3
    /// Unchained records, readable but never written.
    public static let legacyVersion: UInt8 = 1

    /// Bytes after the fields: the chain link and the CRC.
    static let trailerSize = ChainHash.byteCount + 4
    /// version, type, sequence, timestamp, empty project, CRC.
    static let minimumV1Size = 1 + 1 + 8 + 8 + 2 + 4

    enum TypeCode: UInt8 {
        case token = 1, register = 2, unregister = 3, unregisterAll = 4, tokenRejected = 5
        case forgetDevice = 6, dropTopic = 7, expireToken = 8
    }

    /// Encodes `record` chained to `previous` and advances `previous` to this record's link.
    /// A string or list too long for its u16 length is thrown (and `previous` is left as it was).
    /// `version` is 3, or 2 to re-encode a record stored in that version (the link is the same).
    public static func encode(_ record: LogRecord, chainingFrom previous: inout ChainHash,
                              version: UInt8 = currentVersion) throws(FieldTooLong) -> [UInt8] {
        precondition(chainedVersions.contains(version), "version \(version) is not written")
        if version == currentVersion {
            let prepared = try prepare(record.event)
            return [UInt8](unsafeUninitializedCapacity: prepared.sealedCount) { buffer, initialized in
                seal(prepared, sequence: record.sequence, timestamp: record.timestamp, chainingFrom: &previous,
                     into: UnsafeMutableRawBufferPointer(buffer))
                initialized = prepared.sealedCount
            }
        }
        // Version 2: the link covers the stored fields themselves.
        var link = ChainHash.genesis
        let bytes = try encodeFields(record, version: version, trailer: trailerSize) { base, measure in
            let fieldsSize = measure.size
            link = previous.next(over: UnsafeRawBufferPointer(start: base, count: fieldsSize))
            link.withUnsafeBytes { (base + fieldsSize).copyMemory(from: $0.baseAddress!, byteCount: ChainHash.byteCount) }
            let crc = CRC32C.checksum(UnsafeRawBufferPointer(start: base, count: fieldsSize + ChainHash.byteCount))
            (base + fieldsSize + ChainHash.byteCount).storeBytes(of: crc.bigEndian, as: UInt32.self)
        }
        previous = link
        return bytes
    }

    /// `record`'s fields in `version`, measured first (which refuses a field too
    /// long), then written in place into a new array with `trailer` bytes after
    /// them, which `finish` writes (given the array's start and the measure).
    private static func encodeFields(_ record: LogRecord, version: UInt8, trailer: Int,
                                     _ finish: (UnsafeMutableRawPointer, FieldMeasure) -> Void) throws(FieldTooLong) -> [UInt8] {
        var measure = FieldMeasure()
        try writeFields(record, version: version, into: &measure)
        return [UInt8](unsafeUninitializedCapacity: measure.size + trailer) { buffer, initialized in
            let base = UnsafeMutableRawPointer(buffer.baseAddress!)
            var store = FieldStore(base)
            try! writeFields(record, version: version, into: &store)  // measured: nothing is refused
            precondition(store.at == measure.size, "a record's fields took other than their measure")
            finish(base, measure)
            initialized = measure.size + trailer
        }
    }

    /// Encodes `record` chained to `previous` (by default genesis: valid only as
    /// a log's first record; appends carry the chain with `chainingFrom:`).
    public static func encode(_ record: LogRecord, previous: ChainHash = .genesis) throws(FieldTooLong) -> [UInt8] {
        var link = previous
        return try encode(record, chainingFrom: &link)
    }

    /// Fields are named as the API names them, so a refusal reads like a validation error.
    static func writeFields<Sink: FieldSink>(_ record: LogRecord, version: UInt8, into w: inout Sink) throws(FieldTooLong) {
        w.u8(version)
        // Names (device_id, token) in fewer bytes from version 3 on.
        func name(_ s: String, _ field: String) throws(FieldTooLong) {
            if version >= 3 { try w.name(s, field: field) } else { try w.string(s, field: field) }
        }
        let event = record.event
        switch event.body {
        case .token: w.u8(TypeCode.token.rawValue)
        case .register: w.u8(TypeCode.register.rawValue)
        case .unregister: w.u8(TypeCode.unregister.rawValue)
        case .unregisterAll: w.u8(TypeCode.unregisterAll.rawValue)
        case .tokenRejected: w.u8(TypeCode.tokenRejected.rawValue)
        case .forgetDevice: w.u8(TypeCode.forgetDevice.rawValue)
        case .dropTopic: w.u8(TypeCode.dropTopic.rawValue)
        case .expireToken: w.u8(TypeCode.expireToken.rawValue)
        }
        w.u64(record.sequence)
        w.i64(record.timestamp)
        try w.string(event.project, field: "project")
        switch event.body {
        case .token(let deviceID, let token, let platform):
            try name(deviceID, "device_id")
            try name(token, "token")
            w.u8(platform.rawValue)
        case .register(let deviceID, let topics):
            try name(deviceID, "device_id")
            try w.count(topics.count, field: "topics")
            for (i, topic) in topics.enumerated() {
                var flags: UInt8 = 0
                if topic.title != nil { flags |= 1 }
                if let single = topic.single { flags |= 2; if single { flags |= 4 } }
                try w.string(topic.code, field: "topics.\(i).code")
                w.u8(flags)
                if let title = topic.title { try w.string(title, field: "topics.\(i).title") }
            }
        case .unregister(let deviceID, let codes):
            try name(deviceID, "device_id")
            try w.count(codes.count, field: "topics")
            for (i, code) in codes.enumerated() { try w.string(code, field: "topics.\(i).code") }
        case .unregisterAll(let deviceID):
            try name(deviceID, "device_id")
        case .tokenRejected(let token, let at, let reason):
            try name(token, "token")
            w.i64(at)
            try w.string(reason, field: "reason")
        case .forgetDevice(let deviceID):
            try name(deviceID, "device_id")
        case .dropTopic(let code):
            try w.string(code, field: "code")
        case .expireToken(let token):
            try name(token, "token")
        }
    }

    /// Encodes in the legacy unchained version 1 (for tests of old data only).
    public static func encodeLegacyV1(_ record: LogRecord) throws(FieldTooLong) -> [UInt8] {
        try encodeFields(record, version: legacyVersion, trailer: 4) { base, measure in
            let crc = CRC32C.checksum(UnsafeRawBufferPointer(start: base, count: measure.size))
            (base + measure.size).storeBytes(of: crc.bigEndian, as: UInt32.self)
        }
    }

    /// Checks size, checksum and version; returns the version and the span of the fields.
    @inline(__always)
    static func checkFrame(_ bytes: UnsafeRawBufferPointer, key: UInt64) throws(RecordCorruption) -> (version: UInt8, fieldsEnd: Int) {
        guard bytes.count >= minimumV1Size else {
            throw RecordCorruption(sequence: key, offset: 0, reason: "record of \(bytes.count) bytes is too short")
        }
        let body = UnsafeRawBufferPointer(rebasing: bytes[0..<bytes.count - 4])
        let stored = bytes.loadBigEndian(at: bytes.count - 4, as: UInt32.self)
        let computed = CRC32C.checksum(body)
        guard stored == computed else {
            throw RecordCorruption(sequence: key, offset: bytes.count - 4,
                                   reason: "checksum mismatch (stored \(hex(stored)), computed \(hex(computed)))", kind: .checksum)
        }
        let version = bytes[0]
        switch version {
        case chainedVersions:
            guard bytes.count >= minimumV1Size + ChainHash.byteCount else {
                throw RecordCorruption(sequence: key, offset: 0, reason: "version \(version) record of \(bytes.count) bytes is too short")
            }
            return (version, bytes.count - trailerSize)
        case legacyVersion:
            return (version, bytes.count - 4)
        default:
            throw RecordCorruption(sequence: key, offset: 0, reason: "unknown record version \(version)", kind: .version)
        }
    }

    /// The sequence a record's bytes say it has, unchecked (no checksum, no
    /// decoding): where a walk of the log meets a key out of place, whether the
    /// record there is the one due under a damaged key. nil when too short or of
    /// an unknown version.
    public static func statedSequence(of bytes: UnsafeRawBufferPointer) -> UInt64? {
        guard bytes.count >= minimumV1Size, bytes[0] == legacyVersion || chainedVersions.contains(bytes[0]) else { return nil }
        return bytes.loadBigEndian(at: 2, as: UInt64.self)
    }

    /// The chain link stored in a record (after its checksum and version are
    /// checked), or nil for an unchained version 1 record.
    public static func storedLink(of bytes: UnsafeRawBufferPointer, key: UInt64) throws -> ChainHash? {
        let (version, fieldsEnd) = try checkFrame(bytes, key: key)
        guard chainedVersions.contains(version) else { return nil }
        return ChainHash(bytes: UnsafeRawBufferPointer(rebasing: bytes[fieldsEnd..<fieldsEnd + ChainHash.byteCount]))
    }

    /// The bytes where a version 2 record keeps its link, without checking
    /// anything else: lets an audit carry the chain past a record whose other
    /// bytes are damaged, so that one damaged record is reported once.
    public static func unverifiedLink(of bytes: UnsafeRawBufferPointer) -> ChainHash? {
        guard bytes.count >= minimumV1Size + ChainHash.byteCount, chainedVersions.contains(bytes[0]) else { return nil }
        let at = bytes.count - trailerSize
        return ChainHash(bytes: UnsafeRawBufferPointer(rebasing: bytes[at..<at + ChainHash.byteCount]))
    }

    /// Verifies that the record's link is SHA-256(`previous` ‖ its bytes before
    /// the link) and returns it; a mismatch (an altered record, or an altered
    /// record before it) is thrown with the sequence.
    public static func verifyLink(of bytes: UnsafeRawBufferPointer, key: UInt64, previous: ChainHash) throws -> ChainHash {
        let (version, fieldsEnd) = try checkFrame(bytes, key: key)
        guard chainedVersions.contains(version) else {
            throw RecordCorruption(sequence: key, offset: 0, reason: "version \(version) record carries no chain link", kind: .unchained)
        }
        let fields = UnsafeRawBufferPointer(rebasing: bytes[0..<fieldsEnd])
        let computed = version == 2 ? previous.next(over: fields)
                                    : try withVersion2Fields(of: fields, key: key) { previous.next(over: $0) }
        let stored = ChainHash(bytes: UnsafeRawBufferPointer(rebasing: bytes[fieldsEnd..<fieldsEnd + ChainHash.byteCount]))!
        guard stored == computed else {
            throw RecordCorruption(sequence: key, offset: fieldsEnd,
                                   reason: "hash chain broken (stored link \(stored.hex), computed \(computed.hex))", kind: .chain)
        }
        return stored
    }

    /// Calls `body` with the version 2 form of a version 3 record's fields (every
    /// name spelled out as `str`, version byte 2): the bytes its chain link
    /// covers. Rewritten in place of a full decode (no strings built); a
    /// field that does not parse is thrown with its offset.
    static func withVersion2Fields<R>(of fields: UnsafeRawBufferPointer, key: UInt64,
                                      _ body: (UnsafeRawBufferPointer) -> R) throws -> R {
        // A name grows at most from 17 bytes (a UUID) to 38: three times the input is room enough.
        try withUnsafeTemporaryAllocation(byteCount: 3 * fields.count + 16, alignment: 1) { out in
            let p = out.baseAddress!
            var from = 0, to = 0
            func fail(_ reason: String) -> RecordCorruption { RecordCorruption(sequence: key, offset: from, reason: reason) }
            func length(at i: Int) throws -> Int {
                guard i + 2 <= fields.count else { throw fail("field runs past the end") }
                return Int(fields[i]) << 8 | Int(fields[i + 1])
            }
            func copy(_ n: Int) throws {
                guard from + n <= fields.count else { throw fail("field of \(n) bytes runs past the end") }
                (p + to).copyMemory(from: fields.baseAddress! + from, byteCount: n)
                from += n
                to += n
            }
            func string() throws { try copy(2 + length(at: from)) }
            func name() throws {
                var at = from
                guard let stored = StoredName.read(fields, &at) else { throw fail("name does not decode") }
                let n = stored.textCount
                p.storeBytes(of: UInt16(n).bigEndian, toByteOffset: to, as: UInt16.self)
                stored.writeText(to: p + to + 2)
                to += 2 + n
                from = at
            }
            try copy(18)  // version, type, sequence, timestamp
            p.storeBytes(of: 2 as UInt8, as: UInt8.self)
            try string()  // project
            guard let type = TypeCode(rawValue: fields[1]) else { from = 1; throw fail("unknown event type") }
            switch type {
            case .token:
                try name(); try name(); try copy(1)
            case .register:
                try name()
                let n = try length(at: from)
                try copy(2)
                for _ in 0..<n {
                    try string()
                    guard from < fields.count else { throw fail("topic flags run past the end") }
                    let flags = fields[from]
                    try copy(1)
                    if flags & 1 != 0 { try string() }
                }
            case .unregister:
                try name()
                let n = try length(at: from)
                try copy(2)
                for _ in 0..<n { try string() }
            case .unregisterAll, .forgetDevice, .expireToken:
                try name()
            case .tokenRejected:
                try name(); try copy(8); try string()
            case .dropTopic:
                try string()
            }
            guard from == fields.count else { throw fail("\(fields.count - from) unexpected trailing bytes") }
            return body(UnsafeRawBufferPointer(start: p, count: to))
        }
    }

    /// Decodes a record stored under `key`; every failure names the sequence and offset.
    public static func decode(_ bytes: UnsafeRawBufferPointer, key: UInt64) throws -> LogRecord {
        let (_, fieldsEnd) = try checkFrame(bytes, key: key)
        let body = UnsafeRawBufferPointer(rebasing: bytes[0..<fieldsEnd])
        var r = ByteReader(body)
        do {
            let version = try r.u8()  // checked by checkFrame
            // A device_id or token: a StoredName from version 3 on.
            func name() throws -> String {
                guard version >= 3 else { return try r.string() }
                let at = r.offset
                guard at < body.count, StoredName.Form(rawValue: body[at]) != nil else {
                    throw RecordCorruption(sequence: key, offset: at, reason: at < body.count ? "unknown name form \(body[at])" : "name runs past the end")
                }
                return try r.name()
            }
            let typeOffset = r.offset
            guard let type = TypeCode(rawValue: try r.u8()) else {
                throw RecordCorruption(sequence: key, offset: typeOffset, reason: "unknown event type")
            }
            let sequence = try r.u64()
            guard sequence == key else {
                throw RecordCorruption(sequence: key, offset: 2, reason: "record says sequence \(sequence)")
            }
            let timestamp = try r.i64()
            let project = try r.string()
            let eventBody: EventBody
            switch type {
            case .token:
                let deviceID = try name()
                let token = try name()
                let platformOffset = r.offset
                guard let platform = Platform(rawValue: try r.u8()) else {
                    throw RecordCorruption(sequence: key, offset: platformOffset, reason: "unknown platform")
                }
                eventBody = .token(deviceID: deviceID, token: token, platform: platform)
            case .register:
                let deviceID = try name()
                let n = Int(try r.u16())
                var topics: [TopicSpec] = []
                topics.reserveCapacity(n)
                for _ in 0..<n {
                    let code = try r.string()
                    let flags = try r.u8()
                    let title = flags & 1 != 0 ? try r.string() : nil
                    let single: Bool? = flags & 2 != 0 ? (flags & 4 != 0) : nil
                    topics.append(TopicSpec(code: code, title: title, single: single))
                }
                eventBody = .register(deviceID: deviceID, topics: topics)
            case .unregister:
                let deviceID = try name()
                let n = Int(try r.u16())
                var codes: [String] = []
                codes.reserveCapacity(n)
                for _ in 0..<n { codes.append(try r.string()) }
                eventBody = .unregister(deviceID: deviceID, codes: codes)
            case .unregisterAll:
                eventBody = .unregisterAll(deviceID: try name())
            case .tokenRejected:
                let token = try name()
                let at = try r.i64()
                let reason = try r.string()
                eventBody = .tokenRejected(token: token, rejectedAt: at, reason: reason)
            case .forgetDevice:
                eventBody = .forgetDevice(deviceID: try name())
            case .dropTopic:
                eventBody = .dropTopic(code: try r.string())
            case .expireToken:
                eventBody = .expireToken(token: try name())
            }
            guard r.remaining == 0 else {
                throw RecordCorruption(sequence: key, offset: r.offset, reason: "\(r.remaining) unexpected trailing bytes")
            }
            return LogRecord(sequence: sequence, timestamp: timestamp, event: Event(project: project, body: eventBody))
        } catch let e as ByteReader.OutOfBounds {
            throw RecordCorruption(sequence: key, offset: e.offset, reason: "field of \(e.wanted) bytes runs past the end")
        } catch let e as RecordCorruption {
            throw e
        } catch {
            throw RecordCorruption(sequence: key, offset: r.offset, reason: "\(error)")
        }
    }

    /// Reads only the timestamp of an encoded record (for time searches), after the same checks as `decode`.
    public static func timestamp(of bytes: UnsafeRawBufferPointer, key: UInt64) throws -> Int64 {
        guard bytes.count >= 18 else {
            throw RecordCorruption(sequence: key, offset: 0, reason: "record of \(bytes.count) bytes is too short")
        }
        return Int64(bitPattern: bytes.loadBigEndian(at: 10, as: UInt64.self))
    }

    private static func hex(_ v: UInt32) -> String {
        let s = String(v, radix: 16)
        return "0x" + String(repeating: "0", count: 8 - s.count) + s
    }
}

/// A log record that cannot be trusted, located by its sequence and byte offset.
public struct RecordCorruption: Error, Sendable, CustomStringConvertible {
    /// What is wrong, for reports that group faults.
    public enum Kind: String, Sendable {
        /// Too short, a field runs past the end, an unknown type, trailing bytes, a wrong sequence.
        case format
        /// The CRC-32C does not match the bytes.
        case checksum
        /// A version this codec does not know.
        case version
        /// The stored chain link is not SHA-256(previous link ‖ record).
        case chain
        /// A version 1 record, which carries no chain link.
        case unchained
    }
    public let sequence: UInt64
    public let offset: Int
    public let reason: String
    public let kind: Kind
    public init(sequence: UInt64, offset: Int, reason: String, kind: Kind = .format) {
        self.sequence = sequence
        self.offset = offset
        self.reason = reason
        self.kind = kind
    }
    public var description: String { "corrupt log record at sequence \(sequence), byte \(offset): \(reason)" }
}
