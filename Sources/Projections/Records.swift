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
    /// Set in records written since schema 13 whose times are in 0 ..< 2^48
    /// (milliseconds: until the year 10889): each time in 6 bytes, not 8.
    static let shortTimesFlag: UInt8 = 8

    // Schema 4: u8 flags (1 token, 2 rejected, 4 stored names, 8 short times) ‖ u8 platform
    //   ‖ i64 tokenTime (u48 with flag 8) ‖ [i64 rejectedAt, when rejected (u48 with flag 8)]
    //   ‖ name deviceID ‖ [name token, when it has one]
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
        var at = Self.storeHead(hasToken: token != nil, platform: platform?.rawValue ?? 0, tokenTime: tokenTime,
                                rejectedAt: rejectedAt, at: p)
        StoredName.write(deviceID, StoredName.plan(deviceID).form, at: p, &at)
        if let token { StoredName.write(token, StoredName.plan(token).form, at: p, &at) }
        return at
    }

    /// Writes a stored record's flags, platform and times at `p`; returns where its names go.
    @inline(__always)
    private static func storeHead(hasToken: Bool, platform: UInt8, tokenTime: Int64, rejectedAt: Int64?,
                                  at p: UnsafeMutableRawPointer) -> Int {
        let short = fitsShort(tokenTime) && (rejectedAt.map(fitsShort) ?? true)
        var flags = storedNamesFlag | (short ? shortTimesFlag : 0)
        if hasToken { flags |= hasTokenFlag }
        if rejectedAt != nil { flags |= rejectedFlag }
        p.storeBytes(of: flags, as: UInt8.self)
        p.storeBytes(of: platform, toByteOffset: 1, as: UInt8.self)
        var at = 2
        storeTime(tokenTime, short: short, at: p, &at)
        if let rejectedAt { storeTime(rejectedAt, short: short, at: p, &at) }
        return at
    }

    @inline(__always)
    private static func fitsShort(_ time: Int64) -> Bool { time >= 0 && time < 1 << 48 }

    @inline(__always)
    private static func storeTime(_ time: Int64, short: Bool, at p: UnsafeMutableRawPointer, _ at: inout Int) {
        if short {
            p.storeBytes(of: UInt16(truncatingIfNeeded: time >> 32).bigEndian, toByteOffset: at, as: UInt16.self)
            p.storeBytes(of: UInt32(truncatingIfNeeded: time).bigEndian, toByteOffset: at + 2, as: UInt32.self)
            at += 6
        } else {
            p.storeBytes(of: UInt64(bitPattern: time).bigEndian, toByteOffset: at, as: UInt64.self)
            at += 8
        }
    }

    /// A time of a stored record at `at` (6 bytes or 8, as `short` says), or nil past its end.
    @inline(__always)
    private static func loadTime(_ b: UnsafeRawBufferPointer, short: Bool, _ at: inout Int) -> Int64? {
        guard b.count >= at + (short ? 6 : 8) else { return nil }
        defer { at += short ? 6 : 8 }
        guard short else { return Int64(bitPattern: b.loadBigEndian(at: at, as: UInt64.self)) }
        return Int64(b.loadBigEndian(at: at, as: UInt16.self)) << 32 | Int64(b.loadBigEndian(at: at + 2, as: UInt32.self))
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

    // MARK: The text form a build holds (`BuildDevices`)

    /// The length of `encodeText(into:)`.
    var textFormSize: Int { Self.textFormSize(deviceID: deviceID, token: token) }

    /// The length of the text form of a record with these names.
    @inline(__always)
    static func textFormSize(deviceID: String, token: String?) -> Int { 22 + deviceID.utf8.count + (token?.utf8.count ?? 0) }

    /// Writes the record in the format before schema 4, its names as text
    /// (`textFormSize` bytes at `p`; `fields(of:)` reads it): copied, not
    /// packed, as a build puts a record for every token event it folds, and
    /// compared with a name by `textForm(_:hasDeviceID:)` and `textForm(_:holds:)`
    /// without spelling hex out. The same bytes as `writeTextForm` writes from
    /// `Fields`; written through it (and compared through `fields(of:)`), the
    /// rebuild's folding thread took 445 instructions an event more (callgrind
    /// of the 100k bench store): the record copied into the closures, every
    /// field parsed for one comparison.
    func encodeText(into p: UnsafeMutableRawPointer) {
        Self.encodeText(deviceID: deviceID, token: token, platform: platform, tokenTime: tokenTime, rejectedAt: rejectedAt, into: p)
    }

    /// `encodeText(into:)` of the record with these fields, from the names
    /// where they are: a fold that writes a new device's record from its
    /// event's strings does not copy them into a `DeviceRecord` (a retain and
    /// a release of each, on memory the log reader's thread made).
    @inline(__always)
    static func encodeText(deviceID: String, token: String?, platform: Platform?, tokenTime: Int64, rejectedAt: Int64?,
                           into p: UnsafeMutableRawPointer) {
        encodeTextHead(hasToken: token != nil, platform: platform, tokenTime: tokenTime, rejectedAt: rejectedAt, into: p)
        let idCount = storeText(deviceID, at: p + 18)
        if let token { _ = storeText(token, at: p + 20 + idCount) } else { storeText(count: 0, at: p + 20 + idCount) }
    }

    /// `encodeText` of a device with a live token and no rejection, its names' UTF-8 text where it lies.
    static func encodeText(deviceID: UnsafeRawBufferPointer, token: UnsafeRawBufferPointer, platform: Platform, tokenTime: Int64,
                           into p: UnsafeMutableRawPointer) {
        encodeTextHead(hasToken: true, platform: platform, tokenTime: tokenTime, rejectedAt: nil, into: p)
        let idCount = storeText(deviceID, at: p + 18)
        _ = storeText(token, at: p + 20 + idCount)
    }

    /// The first 18 bytes of `encodeText`: flags, platform and the two times.
    @inline(__always)
    static func encodeTextHead(hasToken: Bool, platform: Platform?, tokenTime: Int64, rejectedAt: Int64?,
                               into p: UnsafeMutableRawPointer) {
        p.storeBytes(of: (hasToken ? hasTokenFlag : 0) | (rejectedAt != nil ? rejectedFlag : 0), as: UInt8.self)
        p.storeBytes(of: platform?.rawValue ?? 0, toByteOffset: 1, as: UInt8.self)
        p.storeBytes(of: UInt64(bitPattern: tokenTime).bigEndian, toByteOffset: 2, as: UInt64.self)
        p.storeBytes(of: UInt64(bitPattern: rejectedAt ?? 0).bigEndian, toByteOffset: 10, as: UInt64.self)
    }

    /// A u16 length and the UTF-8 bytes at `p`; returns the bytes' count.
    @inline(__always)
    static func storeText(_ s: String, at p: UnsafeMutableRawPointer) -> Int {
        s.withUTF8Bytes { storeText($0, at: p) }
    }

    /// `storeText` of UTF-8 text where it lies.
    @inline(__always)
    static func storeText(_ t: UnsafeRawBufferPointer, at p: UnsafeMutableRawPointer) -> Int {
        storeText(count: t.count, at: p)
        if t.count > 0 { (p + 2).copyMemory(from: t.baseAddress!, byteCount: t.count) }
        return t.count
    }

    @inline(__always)
    private static func storeText(count: Int, at p: UnsafeMutableRawPointer) {
        p.storeBytes(of: UInt16(count).bigEndian, as: UInt16.self)
    }

    /// Whether the text-form record `b` (`encodeText`) is the one of `deviceID`.
    @inline(__always)
    static func textForm(_ b: UnsafeRawBufferPointer, hasDeviceID id: UnsafeRawBufferPointer) -> Bool {
        let n = Int(b.loadBigEndian(at: 18, as: UInt16.self))
        return n == id.count && (n == 0 || memcmp(b.baseAddress! + 20, id.baseAddress!, n) == 0)
    }

    /// Whether the text-form record `b` (`encodeText`) holds exactly `token` (live or rejected).
    @inline(__always)
    static func textForm(_ b: UnsafeRawBufferPointer, holds token: UnsafeRawBufferPointer) -> Bool {
        guard b[0] & hasTokenFlag != 0 else { return false }
        let idCount = Int(b.loadBigEndian(at: 18, as: UInt16.self))
        let n = Int(b.loadBigEndian(at: 20 + idCount, as: UInt16.self))
        return n == token.count && (n == 0 || memcmp(b.baseAddress! + 22 + idCount, token.baseAddress!, n) == 0)
    }

    /// Writes the stored form (`encode(into:)`) of the text-form record `b`
    /// (`encodeText`) at `p`, which has room for `b.count + 2` bytes, and
    /// returns its length: byte for byte what `encode` writes for the record.
    static func encodeStored(textForm b: UnsafeRawBufferPointer, into p: UnsafeMutableRawPointer) -> Int {
        let flags = b[0]
        var at = storeHead(hasToken: flags & hasTokenFlag != 0, platform: b[1],
                           tokenTime: Int64(bitPattern: b.loadBigEndian(at: 2, as: UInt64.self)),
                           rejectedAt: flags & rejectedFlag != 0 ? Int64(bitPattern: b.loadBigEndian(at: 10, as: UInt64.self)) : nil,
                           at: p)
        let idCount = Int(b.loadBigEndian(at: 18, as: UInt16.self))
        let id = UnsafeRawBufferPointer(rebasing: b[20..<20 + idCount])
        StoredName.write(utf8: id, StoredName.plan(id).form, at: p, &at)
        if flags & hasTokenFlag != 0 {
            let token = UnsafeRawBufferPointer(rebasing: b[(22 + idCount)...])
            StoredName.write(utf8: token, StoredName.plan(token).form, at: p, &at)
        }
        return at
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
        guard b.count >= 8 else { return nil }
        let flags = b[0]
        if flags & storedNamesFlag == 0 {
            guard b.count >= 22 else { return nil }
            let tokenTime = Int64(bitPattern: b.loadBigEndian(at: 2, as: UInt64.self))
            let idLen = Int(b[18]) << 8 | Int(b[19])
            guard b.count >= 22 + idLen else { return nil }
            let tokLen = Int(b[20 + idLen]) << 8 | Int(b[21 + idLen])
            guard b.count == 22 + idLen + tokLen else { return nil }
            return Fields(live: flags & 3 == 1, hasToken: flags & 1 != 0, platform: b[1], tokenTime: tokenTime,
                          rejectedAt: flags & 2 != 0 ? Int64(bitPattern: b.loadBigEndian(at: 10, as: UInt64.self)) : nil,
                          deviceID: StoredName(text: UnsafeRawBufferPointer(rebasing: b[20..<20 + idLen])),
                          token: StoredName(text: UnsafeRawBufferPointer(rebasing: b[(22 + idLen)...])))
        }
        guard flags & ~(hasTokenFlag | rejectedFlag | storedNamesFlag | shortTimesFlag) == 0 else { return nil }
        let short = flags & shortTimesFlag != 0
        var at = 2
        guard let tokenTime = loadTime(b, short: short, &at) else { return nil }
        var rejectedAt: Int64?
        if flags & rejectedFlag != 0 {
            guard let time = loadTime(b, short: short, &at) else { return nil }
            rejectedAt = time
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

/// What a device held before a token change (`ProjectionWriter.replaceToken`):
/// what the fold undoes of it.
struct HeldToken: Equatable {
    enum Token: Equatable {
        /// It had no token.
        case none
        /// It held the new token already (live or rejected).
        case same
        /// It held another token: that token's `OrdinalIndex.hash`, to unfile it.
        case other(hash: UInt64)
    }
    var platform: Platform?
    /// Its token was live (held and not rejected).
    var live: Bool
    var token: Token
}

/// What a token rejection weighs of the device that holds the token
/// (`ProjectionWriter.tokenStanding`).
struct TokenStanding: Equatable {
    /// It holds the rejected token (live or rejected).
    var holds: Bool
    /// Its token is rejected already.
    var rejected: Bool
    /// Store time (ms) of its last token change.
    var tokenTime: Int64
    var platform: Platform?
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

    // Form 2 (written since schema 5; 20 bytes for a per-user topic `user.1234567` whose title is its code, 55 in form 1):
    //   u8 flags (0x80 form 2, 1 single, 2 the title is the code, 4 a subscriber count follows,
    //   8 the last change is the creation) ‖ [u32 subscribers] ‖ varint createdSeq
    //   ‖ [varint lastChangeSeq] ‖ varint code length ‖ code ‖ [varint title length ‖ title]
    //   ‖ varint slice count ‖ u16 slices
    // Form 1 (before, still read; its first byte is 0 or 1): u8 single ‖ u32 subscribers
    //   ‖ u64 createdSeq ‖ u64 lastChangeSeq ‖ str code ‖ str title ‖ u32 slice count ‖ u16 slices
    static let form2Flag: UInt8 = 0x80, singleFlag: UInt8 = 1, titleIsCodeFlag: UInt8 = 2
    static let countFlag: UInt8 = 4, unchangedFlag: UInt8 = 8
    static let form2Flags: UInt8 = form2Flag | singleFlag | titleIsCodeFlag | countFlag | unchangedFlag

    /// The stored record; without `storingCount` (the compact layout), it
    /// stores no subscriber count; with `omittingLastSlice`, the last of its
    /// slices is left out (a record that leaves its project's newest slice out).
    func encoded(storingCount: Bool = true, omittingLastSlice: Bool = false) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: encodedSize(storingCount: storingCount, omittingLastSlice: omittingLastSlice)) { buffer, initialized in
            initialized = encode(into: UnsafeMutableRawPointer(buffer.baseAddress!), storingCount: storingCount,
                                 omittingLastSlice: omittingLastSlice)
        }
    }

    /// The length of `encoded(storingCount:omittingLastSlice:)`.
    func encodedSize(storingCount: Bool = true, omittingLastSlice: Bool = false) -> Int {
        let codeCount = code.utf8.count
        var size = 1 + (storingCount ? 4 : 0) + Varint.size(createdSeq)
        if lastChangeSeq != createdSeq { size += Varint.size(lastChangeSeq) }
        size += Varint.size(UInt64(codeCount)) + codeCount
        if title != code { size += Varint.size(UInt64(title.utf8.count)) + title.utf8.count }
        let sliceCount = storedSliceCount(omittingLastSlice)
        return size + Varint.size(UInt64(sliceCount)) + 2 * sliceCount
    }

    /// At least `encodedSize(storingCount:omittingLastSlice:)`, without
    /// comparing the title with the code: room to encode into. The flags, the
    /// count, varints of at most 10 bytes (the two sequences, the code's
    /// length, the title's length, the slice count), the code, the title and
    /// 2 bytes a slice.
    func encodedSizeBound() -> Int {
        1 + 4 + 3 * 10 + code.utf8.count + 10 + title.utf8.count + 10 + 2 * slices.count
    }

    @inline(__always)
    private func storedSliceCount(_ omittingLastSlice: Bool) -> Int {
        omittingLastSlice && !slices.isEmpty ? slices.count - 1 : slices.count
    }

    /// Writes the encoded record at `p` (which has room for `encodedSize`
    /// bytes, or `encodedSizeBound`) and returns its length: a build writes a
    /// million topics, and appending field by field to an array took most of
    /// the write-out's time for them (as for `DeviceRecord.encode(into:)`).
    /// Encoded from the record where it is held: a copy without its last
    /// slice, and that copy's slices array, cost ~400 instructions a topic of
    /// a rebuild's write-out (callgrind).
    func encode(into p: UnsafeMutableRawPointer, storingCount: Bool = true, omittingLastSlice: Bool = false) -> Int {
        let titleIsCode = title == code
        var flags = Self.form2Flag
        if single { flags |= Self.singleFlag }
        if titleIsCode { flags |= Self.titleIsCodeFlag }
        if storingCount { flags |= Self.countFlag }
        if lastChangeSeq == createdSeq { flags |= Self.unchangedFlag }
        p.storeBytes(of: flags, as: UInt8.self)
        var at = 1
        if storingCount {
            p.storeBytes(of: subscribers.bigEndian, toByteOffset: at, as: UInt32.self)
            at += 4
        }
        Varint.write(createdSeq, at: p, &at)
        if lastChangeSeq != createdSeq { Varint.write(lastChangeSeq, at: p, &at) }
        Self.storeText(code, at: p, &at)
        if !titleIsCode { Self.storeText(title, at: p, &at) }
        let sliceCount = storedSliceCount(omittingLastSlice)
        Varint.write(UInt64(sliceCount), at: p, &at)
        slices.withUnsafeBufferPointer { slices in
            for i in 0..<sliceCount {
                p.storeBytes(of: slices[i].bigEndian, toByteOffset: at, as: UInt16.self)
                at += 2
            }
        }
        return at
    }

    /// A varint length and the UTF-8 bytes.
    @inline(__always)
    private static func storeText(_ s: String, at p: UnsafeMutableRawPointer, _ at: inout Int) {
        let offset = at
        at += s.withUTF8Bytes { utf8 -> Int in
            var end = offset
            Varint.write(UInt64(utf8.count), at: p, &end)
            if utf8.count > 0 { (p + end).copyMemory(from: utf8.baseAddress!, byteCount: utf8.count) }
            return end + utf8.count - offset
        }
    }

    /// Where the fields of a stored record (either form) are, read in place;
    /// nil when the bytes are not a well-formed record.
    struct StoredFields {
        var single: Bool
        var subscribers: UInt32
        var createdSeq: UInt64
        var lastChangeSeq: UInt64
        var code: UnsafeRawBufferPointer
        /// nil: the title is the code.
        var title: UnsafeRawBufferPointer?
        var slices: StoredSlices
    }

    static func fields(of b: UnsafeRawBufferPointer) -> StoredFields? {
        guard let flags = b.first else { return nil }
        if flags & form2Flag == 0 {
            guard flags <= 1, b.count >= 21 else { return nil }
            var at = 21
            // The code, then the title: a u16 length and the bytes (no array: a count reads 100 records).
            func text() -> UnsafeRawBufferPointer? {
                guard b.count >= at + 2 else { return nil }
                let n = Int(b.loadBigEndian(at: at, as: UInt16.self))
                guard b.count >= at + 2 + n else { return nil }
                defer { at += 2 + n }
                return UnsafeRawBufferPointer(rebasing: b[at + 2 ..< at + 2 + n])
            }
            guard let code = text(), let title = text(), b.count >= at + 4 else { return nil }
            let n = Int(b.loadBigEndian(at: at, as: UInt32.self))
            at += 4
            guard n <= 65_536, b.count - at == 2 * n else { return nil }
            return StoredFields(single: flags == 1, subscribers: b.loadBigEndian(at: 1), createdSeq: b.loadBigEndian(at: 5),
                                lastChangeSeq: b.loadBigEndian(at: 13), code: code, title: title,
                                slices: StoredSlices(bytes: UnsafeRawBufferPointer(rebasing: b[at...])))
        }
        guard flags & ~form2Flags == 0 else { return nil }
        var at = 1
        var subscribers: UInt32 = 0
        if flags & countFlag != 0 {
            guard b.count >= 5 else { return nil }
            subscribers = b.loadBigEndian(at: 1)
            at = 5
        }
        guard let created = Varint.read(b, &at) else { return nil }
        var last = created
        if flags & unchangedFlag == 0 {
            guard let l = Varint.read(b, &at), l != created else { return nil }
            last = l
        }
        func text() -> UnsafeRawBufferPointer? {
            guard let n = Varint.read(b, &at), n <= UInt64(b.count - at) else { return nil }
            defer { at += Int(n) }
            return UnsafeRawBufferPointer(rebasing: b[at ..< at + Int(n)])
        }
        guard let code = text() else { return nil }
        var title: UnsafeRawBufferPointer?
        if flags & titleIsCodeFlag == 0 {
            guard let t = text() else { return nil }
            title = t
        }
        guard let n = Varint.read(b, &at), n <= 65_536, UInt64(b.count - at) == 2 * n else { return nil }
        return StoredFields(single: flags & singleFlag != 0, subscribers: subscribers, createdSeq: created, lastChangeSeq: last,
                            code: code, title: title, slices: StoredSlices(bytes: UnsafeRawBufferPointer(rebasing: b[at...])))
    }

    /// The slice list of an encoded record, read in place (a topic's bitmap
    /// needs nothing else) without an array: an audience of 100 per-user topics
    /// allocated one per topic. nil when the bytes do not hold a well-formed
    /// record, which the full decode then reports.
    static func storedSlices(of b: UnsafeRawBufferPointer) -> StoredSlices? { fields(of: b)?.slices }

    /// A record's slices where they are stored (big-endian u16s), valid while those bytes are.
    struct StoredSlices: Sequence {
        let bytes: UnsafeRawBufferPointer
        var count: Int { bytes.count / 2 }
        var last: UInt16? { count == 0 ? nil : bytes.loadBigEndian(at: 2 * (count - 1), as: UInt16.self) }

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

    public init(decoding bytes: UnsafeRawBufferPointer, at place: @autoclosure () -> String) throws {
        guard let f = Self.fields(of: bytes) else {
            throw ProjectionCorruption(place: place(), reason: "topic record does not decode (\(bytes.count) bytes)")
        }
        single = f.single
        subscribers = f.subscribers
        createdSeq = f.createdSeq
        lastChangeSeq = f.lastChangeSeq
        code = String(decoding: f.code, as: UTF8.self)
        title = f.title.map { String(decoding: $0, as: UTF8.self) } ?? code
        slices = Array(f.slices)
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
