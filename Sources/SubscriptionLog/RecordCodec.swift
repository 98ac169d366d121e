import Digest
/// The binary form of a log record, version 5 (hash-chained, the link's first
/// 8 bytes stored) or version 4 (the whole link stored):
///
/// ```
/// u8  version (5 or 4)   u8  type        u48 timestamp (ms since 1970)
/// short project          ...type-specific fields...
/// [8] or [32] chain link = SHA-256(previous record's link ‖ the record's version 2 form)
/// u32 CRC-32C of the record's key (its 8-byte sequence) and every byte before it
/// ```
/// Integers are big-endian; `short` is a string with a `ShortLength` (one
/// byte for 0…254, else 255 and a u16) and UTF-8 bytes, and a list's length
/// is a `ShortLength` too; a device_id or a token is a `StoredName` (a UUID in
/// 16 bytes, a run of hex digits in half its length, an FCM-shaped token in 6
/// bits a character, anything else as text). The first record's previous link
/// is `ChainHash.genesis` (32 zero bytes).
///
/// Every `fullLinkInterval`-th record (by sequence) is written in version 4,
/// with its whole link; the records between in version 5, with the link's
/// first 8 bytes. The chain is the same either way: each link is the SHA-256
/// of the whole link before it. A reader follows it from a whole link (or from
/// genesis, or a compaction's head) and checks each record's 8 bytes against
/// the link it computes, so a record altered with its checksum recomputed is
/// found and located as before; the head an auditor anchors is a whole link,
/// computed. The log is 24 bytes a record smaller (16% at bench's 10M store),
/// and the link of any record is at most 63 records' hashing away
/// (`EventLog.link(at:)`).
///
/// The sequence is not stored: the key holds it, and the CRC covers the key,
/// so a record under another key than its own fails its checksum. A record
/// whose timestamp does not fit in 48 bits (before 1970 or after the year
/// 10889: never the writer's clock, only an imported line) is written in
/// version 3.
///
/// Version 5 is written since schema 9. Version 4 was every record's form in
/// schema 8.
/// Version 3 is the form written from schema 4 to schema 7: `u64 sequence`
/// after the type, `i64 timestamp`, `str` (u16-length) strings and u16 list
/// lengths, names as in version 4, the CRC of the bytes alone. It still
/// decodes and verifies.
///
/// The chain link is computed over the record's version 2 form: version byte
/// 2, the type, the sequence as u64, the timestamp as i64, every string and
/// name as `str` and every list length as u16. So the chain commits to the
/// events, not to how they are stored: a log of version 2 to 5 records,
/// and an export of it imported again, give the same links and the same head.
///
/// Version 2 is that form itself; it still decodes and verifies, and is
/// written only to re-encode a version 2 record (an archive's verification).
/// Version 1 is version 2 without the chain link; it still decodes (it
/// carries no link, so an audit reports it as unchained) but is never written.
public enum RecordCodec {
    /// The version most records are written in (the first 8 bytes of their link).
    public static let currentVersion: UInt8 = 5
    /// The version every `fullLinkInterval`-th record is written in (its whole link).
    public static let fullLinkVersion: UInt8 = 4
    /// Every record whose sequence is a multiple of this is written with its whole link.
    public static let fullLinkInterval: UInt64 = 64
    /// The versions that carry a chain link (version 5 its first 8 bytes).
    public static let chainedVersions: ClosedRange<UInt8> = 2...5
    /// Unchained records, readable but never written.
    public static let legacyVersion: UInt8 = 1

    /// The version a record under `sequence` is written in (with a timestamp in 48 bits).
    @inline(__always)
    public static func writtenVersion(at sequence: UInt64) -> UInt8 {
        sequence % fullLinkInterval == 0 ? fullLinkVersion : currentVersion
    }

    /// The bytes a record of `version` keeps of its link: 8 in version 5, 32 before.
    @inline(__always)
    static func linkSize(_ version: UInt8) -> Int { version == 5 ? shortLinkSize : ChainHash.byteCount }
    static let shortLinkSize = 8
    /// Bytes after the fields of a record of `version`: (what it keeps of) the chain link and the CRC.
    @inline(__always)
    static func trailerSize(_ version: UInt8) -> Int { linkSize(version) + 4 }
    /// Whether a record of `version` has the compact fields (no sequence, u48 time, short
    /// lengths) and a CRC that covers its key: versions 4 and 5.
    @inline(__always)
    static func isCompact(_ version: UInt8?) -> Bool { version == 4 || version == 5 }
    /// version, type, sequence, timestamp, empty project, CRC.
    static let minimumV1Size = 1 + 1 + 8 + 8 + 2 + 4
    /// version, type, timestamp, empty project, link, CRC.
    static let minimumV4Size = 1 + 1 + 6 + 1 + ChainHash.byteCount + 4
    /// version, type, timestamp, empty project, the link's 8 bytes, CRC.
    static let minimumV5Size = 1 + 1 + 6 + 1 + shortLinkSize + 4
    /// The timestamps a version 4 record holds (u48).
    static let time48Range: ClosedRange<Int64> = 0...(1 << 48 - 1)

    /// The CRC-32C a record stored under `key` must end with, computed over its
    /// bytes before the CRC (`record` without its last 4 bytes): for versions 4
    /// and 5 it covers the key first, for the versions before them the bytes alone.
    /// (How a tool outside topicstore, or a test that forges a record, computes it.)
    public static func checksum(ofRecordBody body: UnsafeRawBufferPointer, version: UInt8, key: UInt64) -> UInt32 {
        isCompact(version) ? keyedChecksum(body, key: key) : CRC32C.checksum(body)
    }

    /// A version 4 or 5 record's CRC: of its key's 8 bytes (big-endian), then of `body`.
    @inline(__always)
    static func keyedChecksum(_ body: UnsafeRawBufferPointer, key: UInt64) -> UInt32 {
        let seed = withUnsafeBytes(of: key.bigEndian) { CRC32C.checksum($0) }
        return CRC32C.checksum(body, seed: seed)
    }

    enum TypeCode: UInt8 {
        case token = 1, register = 2, unregister = 3, unregisterAll = 4, tokenRejected = 5
        case forgetDevice = 6, dropTopic = 7, expireToken = 8
    }

    /// Encodes `record` chained to `previous` and advances `previous` to this record's link.
    /// A string or list too long for its u16 length is thrown (and `previous` is left as it was).
    /// `version` is by default the one its sequence is written in (`writtenVersion(at:)`; 3
    /// when the timestamp does not fit in 48 bits), or 2 to 5 to re-encode a record stored in
    /// that version (the link is the same).
    public static func encode(_ record: LogRecord, chainingFrom previous: inout ChainHash,
                              version: UInt8? = nil) throws(FieldTooLong) -> [UInt8] {
        let version = version ?? writtenVersion(at: record.sequence)
        precondition(chainedVersions.contains(version), "version \(version) is not written")
        if isCompact(version), time48Range.contains(record.timestamp) {
            let prepared = try prepare(record.event)
            let count = prepared.sealedCount(version: version)
            return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                seal(prepared, sequence: record.sequence, timestamp: record.timestamp, version: version,
                     chainingFrom: &previous, into: UnsafeMutableRawBufferPointer(buffer))
                initialized = count
            }
        }
        let stored: UInt8 = version == 2 ? 2 : 3
        // Version 2 is the form the link covers; version 3 stores other bytes under the same link.
        let form = try encodeFields(record, version: 2, trailer: 0) { _, _ in }
        let link = form.withUnsafeBytes { previous.next(over: $0) }
        let bytes = try encodeFields(record, version: stored, trailer: trailerSize(stored)) { base, measure in
            let fieldsSize = measure.size
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
    public static func encode(_ record: LogRecord, previous: ChainHash = .genesis,
                              version: UInt8? = nil) throws(FieldTooLong) -> [UInt8] {
        var link = previous
        return try encode(record, chainingFrom: &link, version: version)
    }

    /// Fields are named as the API names them, so a refusal reads like a validation error.
    static func writeFields<Sink: FieldSink>(_ record: LogRecord, version: UInt8, into w: inout Sink) throws(FieldTooLong) {
        w.u8(version)
        // Names (device_id, token) in fewer bytes from version 3 on.
        func name(_ s: String, _ field: @autoclosure () -> String) throws(FieldTooLong) {
            if version >= 3 { try w.name(s, field: field()) } else { try w.string(s, field: field()) }
        }
        // Strings and list lengths with a short length from version 4 on.
        func string(_ s: String, _ field: @autoclosure () -> String) throws(FieldTooLong) {
            if version >= 4 { try w.shortString(s, field: field()) } else { try w.string(s, field: field()) }
        }
        func count(_ n: Int, _ field: String) throws(FieldTooLong) {
            if version >= 4 { try w.shortCount(n, field: field) } else { try w.count(n, field: field) }
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
        if version >= 4 {
            w.omittedSequence()
            w.time48(record.timestamp)
        } else {
            w.u64(record.sequence)
            w.i64(record.timestamp)
        }
        try string(event.project, "project")
        switch event.body {
        case .token(let deviceID, let token, let platform):
            try name(deviceID, "device_id")
            try name(token, "token")
            w.u8(platform.rawValue)
        case .register(let deviceID, let topics):
            try name(deviceID, "device_id")
            try count(topics.count, "topics")
            for (i, topic) in topics.enumerated() {
                var flags: UInt8 = 0
                if topic.title != nil { flags |= 1 }
                if let single = topic.single { flags |= 2; if single { flags |= 4 } }
                try string(topic.code, "topics.\(i).code")
                w.u8(flags)
                if let title = topic.title { try string(title, "topics.\(i).title") }
            }
        case .unregister(let deviceID, let codes):
            try name(deviceID, "device_id")
            try count(codes.count, "topics")
            for (i, code) in codes.enumerated() { try string(code, "topics.\(i).code") }
        case .unregisterAll(let deviceID):
            try name(deviceID, "device_id")
        case .tokenRejected(let token, let at, let reason):
            try name(token, "token")
            w.i64(at)
            try string(reason, "reason")
        case .forgetDevice(let deviceID):
            try name(deviceID, "device_id")
        case .dropTopic(let code):
            try string(code, "code")
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
    /// A version 4 or 5 record's checksum covers `key`: one under another key fails it.
    @inline(__always)
    static func checkFrame(_ bytes: UnsafeRawBufferPointer, key: UInt64) throws(RecordCorruption) -> (version: UInt8, fieldsEnd: Int) {
        let keyed = isCompact(bytes.first)
        guard bytes.count >= (!keyed ? minimumV1Size : bytes.first == 5 ? minimumV5Size : minimumV4Size) else {
            throw RecordCorruption(sequence: key, offset: 0, reason: "record of \(bytes.count) bytes is too short")
        }
        let body = UnsafeRawBufferPointer(rebasing: bytes[0..<bytes.count - 4])
        let stored = bytes.loadBigEndian(at: bytes.count - 4, as: UInt32.self)
        let computed = checksum(ofRecordBody: body, version: bytes[0], key: key)
        guard stored == computed else {
            throw RecordCorruption(sequence: key, offset: bytes.count - 4,
                                   reason: "checksum mismatch (stored \(hex(stored)), computed \(hex(computed)))"
                                       + (keyed ? " for key \(key)" : ""), kind: .checksum)
        }
        let version = bytes[0]
        switch version {
        case 4, 5:
            return (version, bytes.count - trailerSize(version))
        case chainedVersions:
            guard bytes.count >= minimumV1Size + ChainHash.byteCount else {
                throw RecordCorruption(sequence: key, offset: 0, reason: "version \(version) record of \(bytes.count) bytes is too short")
            }
            return (version, bytes.count - trailerSize(version))
        case legacyVersion:
            return (version, bytes.count - 4)
        default:
            throw RecordCorruption(sequence: key, offset: 0, reason: "unknown record version \(version)", kind: .version)
        }
    }

    /// The sequence a record's bytes say it has (no decoding): where a walk of
    /// the log meets a key out of place, whether the record there is the one
    /// due under a damaged key. Versions 1 to 3 state it in a field, read
    /// unchecked. A version 4 or 5 record states it through its checksum, which
    /// covers the key: under its own key (`key == due`) it is taken unchecked
    /// to be `key`; elsewhere it is `due` or `key` when its checksum fits that
    /// sequence. nil when too short, of an unknown version, or fitting neither.
    public static func statedSequence(of bytes: UnsafeRawBufferPointer, key: UInt64?, due: UInt64) -> UInt64? {
        guard let version = bytes.first else { return nil }
        if isCompact(version) {
            guard bytes.count >= (version == 5 ? minimumV5Size : minimumV4Size) else { return nil }
            if key == due { return due }
            let body = UnsafeRawBufferPointer(rebasing: bytes[0..<bytes.count - 4])
            let stored = bytes.loadBigEndian(at: bytes.count - 4, as: UInt32.self)
            if keyedChecksum(body, key: due) == stored { return due }
            if let key, keyedChecksum(body, key: key) == stored { return key }
            return nil
        }
        guard bytes.count >= minimumV1Size, version == legacyVersion || chainedVersions.contains(version) else { return nil }
        return bytes.loadBigEndian(at: 2, as: UInt64.self)
    }

    /// What a record keeps of its chain link (after its checksum and version are checked).
    public enum StoredLink: Equatable, Sendable {
        /// A version 1 record: no link.
        case none
        /// Versions 2 to 4: the whole link.
        case whole(ChainHash)
        /// Version 5: the link's first 8 bytes (as a big-endian integer).
        case prefix(UInt64)

        /// Whether `link` is the link this record keeps (all of it or its first 8 bytes).
        public func matches(_ link: ChainHash) -> Bool {
            switch self {
            case .none: return false
            case .whole(let stored): return stored == link
            case .prefix(let stored): return stored == link.prefix
            }
        }
    }

    /// What `bytes`, the record under `key`, keeps of its chain link.
    public static func storedLinkPart(of bytes: UnsafeRawBufferPointer, key: UInt64) throws -> StoredLink {
        let (version, fieldsEnd) = try checkFrame(bytes, key: key)
        switch version {
        case legacyVersion: return .none
        case 5: return .prefix(bytes.loadBigEndian(at: fieldsEnd, as: UInt64.self))
        default: return .whole(ChainHash(bytes: UnsafeRawBufferPointer(rebasing: bytes[fieldsEnd..<fieldsEnd + ChainHash.byteCount]))!)
        }
    }

    /// The whole chain link stored in a record (after its checksum and version
    /// are checked); nil for an unchained version 1 record and for a version 5
    /// record, which keeps only the link's first 8 bytes (`EventLog.link(at:)`
    /// computes its link from the last whole one before it).
    public static func storedLink(of bytes: UnsafeRawBufferPointer, key: UInt64) throws -> ChainHash? {
        guard case .whole(let link) = try storedLinkPart(of: bytes, key: key) else { return nil }
        return link
    }

    /// The bytes where a version 2 to 4 record keeps its whole link, without
    /// checking anything else: lets an audit carry the chain past a record whose
    /// other bytes are damaged, so that one damaged record is reported once.
    /// nil for a version 1 or 5 record (and for bytes too short to hold a link).
    public static func unverifiedLink(of bytes: UnsafeRawBufferPointer) -> ChainHash? {
        guard let version = bytes.first, chainedVersions.contains(version), version != 5,
              bytes.count >= (version == 4 ? minimumV4Size : minimumV1Size + ChainHash.byteCount) else { return nil }
        let at = bytes.count - trailerSize(version)
        return ChainHash(bytes: UnsafeRawBufferPointer(rebasing: bytes[at..<at + ChainHash.byteCount]))
    }

    /// Verifies that the record's link is SHA-256(`previous` ‖ its version 2
    /// form) and returns it (the whole link, also for a version 5 record, which
    /// keeps its first 8 bytes); a mismatch (an altered record, or an altered
    /// record before it) is thrown with the sequence.
    public static func verifyLink(of bytes: UnsafeRawBufferPointer, key: UInt64, previous: ChainHash) throws -> ChainHash {
        try checkedLink(of: bytes, key: key, previous: previous).link
    }

    /// `verifyLink`, with where the record's fields end.
    private static func checkedLink(of bytes: UnsafeRawBufferPointer, key: UInt64,
                                    previous: ChainHash) throws -> (link: ChainHash, fieldsEnd: Int) {
        let (version, fieldsEnd) = try checkFrame(bytes, key: key)
        guard chainedVersions.contains(version) else {
            throw RecordCorruption(sequence: key, offset: 0, reason: "version \(version) record carries no chain link", kind: .unchained)
        }
        let fields = UnsafeRawBufferPointer(rebasing: bytes[0..<fieldsEnd])
        let computed = version == 2 ? previous.next(over: fields)
                                    : try version2Link(of: fields, key: key, previous: previous)
        return (try storedLink(bytes, version: version, fieldsEnd: fieldsEnd, key: key, computed: computed), fieldsEnd)
    }

    /// The link a chained record of `version` stores after its fields, checked
    /// against the link `computed` for it; a version 5 record stores 8 bytes of
    /// it, and the link is then the one computed.
    private static func storedLink(_ bytes: UnsafeRawBufferPointer, version: UInt8, fieldsEnd: Int, key: UInt64,
                                   computed: ChainHash) throws -> ChainHash {
        if version == 5 {
            let stored = bytes.loadBigEndian(at: fieldsEnd, as: UInt64.self)
            guard stored == computed.prefix else {
                throw RecordCorruption(sequence: key, offset: fieldsEnd,
                                       reason: "hash chain broken (stored link \(hex(stored))…, computed \(computed.hex))", kind: .chain)
            }
            return computed
        }
        let stored = ChainHash(bytes: UnsafeRawBufferPointer(rebasing: bytes[fieldsEnd..<fieldsEnd + ChainHash.byteCount]))!
        guard stored == computed else {
            throw RecordCorruption(sequence: key, offset: fieldsEnd,
                                   reason: "hash chain broken (stored link \(stored.hex), computed \(computed.hex))", kind: .chain)
        }
        return stored
    }

    /// The link after `previous` of a version 3, 4 or 5 record's fields: over
    /// their version 2 form (version byte 2, the sequence `key`, an i64
    /// timestamp, every name spelled out as `str`, u16 lengths). Rewritten in
    /// place of a full decode (no strings built), after room for `previous`
    /// and with room for SHA-256's padding, and hashed there
    /// (`ChainHash.next(overBodyAfterRoomIn:count:)`); a field that does not
    /// parse is thrown with its offset.
    static func version2Link(of fields: UnsafeRawBufferPointer, key: UInt64, previous: ChainHash) throws -> ChainHash {
        // A name grows at most from 17 bytes (a UUID) to 38, a short length from 1 byte to 2, the
        // header by 10 bytes: three times the input and 16 bytes are room enough.
        let compact = isCompact(fields.first)
        let room = ChainHash.byteCount, most = 3 * fields.count + 16
        return try withUnsafeTemporaryAllocation(byteCount: SHA256.paddedSize(room + most), alignment: 16) { buffer in
            let p = buffer.baseAddress! + room
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
            func string() throws {
                guard compact else { return try copy(2 + length(at: from)) }
                let n = try shortLength()
                try copy(n)
            }
            /// A version 4 length, written out as a u16.
            func shortLength() throws -> Int {
                var r = ByteReader(fields)
                _ = try r.bytes(from)
                let n: Int
                do { n = try r.shortLength() } catch is ByteReader.OutOfBounds {
                    throw fail("field runs past the end")
                } catch let e as ByteReader.Malformed {
                    throw RecordCorruption(sequence: key, offset: e.offset, reason: e.reason)
                }
                p.storeBytes(of: UInt16(n).bigEndian, toByteOffset: to, as: UInt16.self)
                to += 2
                from = r.offset
                return n
            }
            func count() throws -> Int {
                guard compact else {
                    let n = try length(at: from)
                    try copy(2)
                    return n
                }
                return try shortLength()
            }
            func name() throws {
                var at = from
                guard let stored = StoredName.read(fields, &at) else { throw fail("name does not decode") }
                let n = stored.textCount
                p.storeBytes(of: UInt16(n).bigEndian, toByteOffset: to, as: UInt16.self)
                stored.writeText(to: p + to + 2)
                to += 2 + n
                from = at
            }
            if compact {
                // version, type, u48 timestamp; the sequence is the key's.
                guard fields.count >= compactHeaderSize else { throw fail("header runs past the end") }
                p.storeBytes(of: fields[1], toByteOffset: 1, as: UInt8.self)
                p.storeBytes(of: key.bigEndian, toByteOffset: 2, as: UInt64.self)
                p.storeBytes(of: fields.loadBigEndianU48(at: 2).bigEndian, toByteOffset: 10, as: UInt64.self)
                from = compactHeaderSize
                to = headerSize
            } else {
                try copy(18)  // version, type, sequence, timestamp
            }
            p.storeBytes(of: 2 as UInt8, as: UInt8.self)
            try string()  // project
            guard let type = TypeCode(rawValue: fields[1]) else { from = 1; throw fail("unknown event type") }
            switch type {
            case .token:
                try name(); try name(); try copy(1)
            case .register:
                try name()
                let n = try count()
                for _ in 0..<n {
                    try string()
                    guard from < fields.count else { throw fail("topic flags run past the end") }
                    let flags = fields[from]
                    try copy(1)
                    if flags & 1 != 0 { try string() }
                }
            case .unregister:
                try name()
                let n = try count()
                for _ in 0..<n { try string() }
            case .unregisterAll, .forgetDevice, .expireToken:
                try name()
            case .tokenRejected:
                try name(); try copy(8); try string()
            case .dropTopic:
                try string()
            }
            guard from == fields.count else { throw fail("\(fields.count - from) unexpected trailing bytes") }
            return previous.next(overBodyAfterRoomIn: buffer, count: to)
        }
    }

    /// Decodes a record stored under `key`; every failure names the sequence and offset.
    public static func decode(_ bytes: UnsafeRawBufferPointer, key: UInt64) throws -> LogRecord {
        let (_, fieldsEnd) = try checkFrame(bytes, key: key)
        return try decodeFields(UnsafeRawBufferPointer(rebasing: bytes[0..<fieldsEnd]), key: key)
    }

    /// `verifyLink(of:key:previous:)` and then `decode(_:key:)`, the record's
    /// frame checked once: its CRC was computed twice (0.8% of a rebuild's log
    /// reader, callgrind). Throws what those two would throw, in
    /// their order. (Decoding from the version 2 form the link is computed
    /// over, where every name is spelled out already, cost more than it saved:
    /// that form's u16 lengths and Strings made from bytes, measured.)
    public static func decodeVerifyingLink(_ bytes: UnsafeRawBufferPointer, key: UInt64,
                                           previous: ChainHash) throws -> (record: LogRecord, link: ChainHash) {
        let (link, fieldsEnd) = try checkedLink(of: bytes, key: key, previous: previous)
        return (try decodeFields(UnsafeRawBufferPointer(rebasing: bytes[0..<fieldsEnd]), key: key), link)
    }

    /// `decode(_:key:)` for the fold: the device_ids and tokens spelled into `names`.
    public static func decode(_ bytes: UnsafeRawBufferPointer, key: UInt64, names: NameArena) throws -> FoldRecord {
        let (_, fieldsEnd) = try checkFrame(bytes, key: key)
        let (sequence, timestamp, project, body) = try decodeFields(UnsafeRawBufferPointer(rebasing: bytes[0..<fieldsEnd]), key: key, names: names)
        return FoldRecord(sequence: sequence, timestamp: timestamp, project: project, body: body)
    }

    /// `decodeVerifyingLink(_:key:previous:)` for the fold: the device_ids and tokens spelled into `names`.
    public static func decodeVerifyingLink(_ bytes: UnsafeRawBufferPointer, key: UInt64, previous: ChainHash,
                                           names: NameArena) throws -> (record: FoldRecord, link: ChainHash) {
        let (link, fieldsEnd) = try checkedLink(of: bytes, key: key, previous: previous)
        let (sequence, timestamp, project, body) = try decodeFields(UnsafeRawBufferPointer(rebasing: bytes[0..<fieldsEnd]), key: key, names: names)
        return (FoldRecord(sequence: sequence, timestamp: timestamp, project: project, body: body), link)
    }

    /// The fields of a record (`bytes` up to its link and CRC, whose frame was checked) decoded.
    static func decodeFields(_ body: UnsafeRawBufferPointer, key: UInt64) throws -> LogRecord {
        let (sequence, timestamp, project, fields) = try decodeFields(body, key: key, names: NamesAsStrings())
        return LogRecord(sequence: sequence, timestamp: timestamp, event: Event(project: project, body: fields))
    }

    /// The fields of a record (`bytes` up to its link and CRC, whose frame was
    /// checked) decoded, its device_ids and tokens made by `names`.
    static func decodeFields<Names: RecordNames>(_ body: UnsafeRawBufferPointer, key: UInt64, names: Names) throws
        -> (sequence: UInt64, timestamp: Int64, project: String, body: EventBodyOf<Names.Name>) {
        var r = ByteReader(body)
        do {
            let version = try r.u8()  // checked by checkFrame
            // A device_id or token: a StoredName from version 3 on.
            func name() throws -> Names.Name {
                guard version >= 3 else { return names.name(text: try r.bytes(Int(try r.u16()))) }
                let at = r.offset
                guard at < body.count, StoredName.Form(rawValue: body[at]) != nil else {
                    throw RecordCorruption(sequence: key, offset: at, reason: at < body.count ? "unknown name form \(body[at])" : "name runs past the end")
                }
                return names.name(try r.storedName())
            }
            let typeOffset = r.offset
            guard let type = TypeCode(rawValue: try r.u8()) else {
                throw RecordCorruption(sequence: key, offset: typeOffset, reason: "unknown event type")
            }
            // Versions 4 and 5 state no sequence (the checksum covers the key) and have short lengths.
            let compact = version >= 4
            func string() throws -> String { compact ? try r.shortString() : try r.string() }
            func count() throws -> Int { compact ? try r.shortLength() : Int(try r.u16()) }
            let sequence: UInt64
            let timestamp: Int64
            if compact {
                sequence = key
                timestamp = Int64(try r.u48())
            } else {
                sequence = try r.u64()
                guard sequence == key else {
                    throw RecordCorruption(sequence: key, offset: 2, reason: "record says sequence \(sequence)")
                }
                timestamp = try r.i64()
            }
            let project = try string()
            let eventBody: EventBodyOf<Names.Name>
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
                let n = try count()
                var topics: [TopicSpec] = []
                topics.reserveCapacity(n)
                for _ in 0..<n {
                    let code = try string()
                    let flags = try r.u8()
                    let title = flags & 1 != 0 ? try string() : nil
                    let single: Bool? = flags & 2 != 0 ? (flags & 4 != 0) : nil
                    topics.append(TopicSpec(code: code, title: title, single: single))
                }
                eventBody = .register(deviceID: deviceID, topics: topics)
            case .unregister:
                let deviceID = try name()
                let n = try count()
                var codes: [String] = []
                codes.reserveCapacity(n)
                for _ in 0..<n { codes.append(try string()) }
                eventBody = .unregister(deviceID: deviceID, codes: codes)
            case .unregisterAll:
                eventBody = .unregisterAll(deviceID: try name())
            case .tokenRejected:
                let token = try name()
                let at = try r.i64()
                let reason = try string()
                eventBody = .tokenRejected(token: token, rejectedAt: at, reason: reason)
            case .forgetDevice:
                eventBody = .forgetDevice(deviceID: try name())
            case .dropTopic:
                eventBody = .dropTopic(code: try string())
            case .expireToken:
                eventBody = .expireToken(token: try name())
            }
            guard r.remaining == 0 else {
                throw RecordCorruption(sequence: key, offset: r.offset, reason: "\(r.remaining) unexpected trailing bytes")
            }
            return (sequence, timestamp, project, eventBody)
        } catch let e as ByteReader.OutOfBounds {
            throw RecordCorruption(sequence: key, offset: e.offset, reason: "field of \(e.wanted) bytes runs past the end")
        } catch let e as ByteReader.Malformed {
            throw RecordCorruption(sequence: key, offset: e.offset, reason: e.reason)
        } catch let e as RecordCorruption {
            throw e
        } catch {
            throw RecordCorruption(sequence: key, offset: r.offset, reason: "\(error)")
        }
    }

    /// Whether an encoded record's project is `project` (its UTF-8 bytes), read
    /// from its header without decoding it (nor checking it: a caller that
    /// trusts the answer has checked the record's frame or link first, or
    /// answers only once it has, as `History` does with its chain follower).
    public static func names(project: [UInt8], _ bytes: UnsafeRawBufferPointer) -> Bool {
        let n = project.count
        if isCompact(bytes.first) {
            // version ‖ type ‖ u48 time ‖ short length ‖ project
            var r = ByteReader(bytes)
            guard (try? r.bytes(compactHeaderSize)) != nil, (try? r.shortLength()) == n,
                  let name = try? r.bytes(n) else { return false }
            return name.elementsEqual(project)
        }
        // version ‖ type ‖ sequence ‖ time ‖ u16 length ‖ project
        guard bytes.count >= 20 + n else { return false }
        return Int(bytes[18]) << 8 | Int(bytes[19]) == n && bytes[20..<20 + n].elementsEqual(project)
    }

    /// Reads only the timestamp of an encoded record (for time searches), after the same checks as `decode`.
    public static func timestamp(of bytes: UnsafeRawBufferPointer, key: UInt64) throws -> Int64 {
        let compact = isCompact(bytes.first)
        guard bytes.count >= (compact ? compactHeaderSize : headerSize) else {
            throw RecordCorruption(sequence: key, offset: 0, reason: "record of \(bytes.count) bytes is too short")
        }
        guard compact else { return Int64(bitPattern: bytes.loadBigEndian(at: 10, as: UInt64.self)) }
        return Int64(bytes.loadBigEndianU48(at: 2))
    }

    private static func hex(_ v: UInt32) -> String {
        let s = String(v, radix: 16)
        return "0x" + String(repeating: "0", count: 8 - s.count) + s
    }

    private static func hex(_ v: UInt64) -> String {
        let s = String(v, radix: 16)
        return String(repeating: "0", count: 16 - s.count) + s
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

/// What a decoded record's device_ids and tokens are made into (`RecordCodec.decodeFields`).
protocol RecordNames {
    associatedtype Name
    /// A name stored as a `StoredName` (versions 3 on).
    func name(_ stored: StoredName) -> Name
    /// A name stored as a string (versions 1 and 2): its bytes, repaired when they are not UTF-8.
    func name(text: UnsafeRawBufferPointer) -> Name
}

/// Names as Strings: a `LogRecord`'s.
struct NamesAsStrings: RecordNames {
    func name(_ stored: StoredName) -> String { stored.string }
    func name(text: UnsafeRawBufferPointer) -> String { String(decodingLogText: text) }
}

/// Names as text held in the arena: a `FoldRecord`'s.
extension NameArena: RecordNames {
    func name(_ stored: StoredName) -> NameText { text(of: stored) }
    func name(text: UnsafeRawBufferPointer) -> NameText { self.text(copying: text) }
}
