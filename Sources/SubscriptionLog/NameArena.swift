import Glibc

/// A device_id's or a token's UTF-8 text, held elsewhere: in a `NameArena`,
/// or in a String for the length of a call (`EventBody.withTexts`). Valid
/// only while what holds it lives; never kept past the event that names it.
public struct NameText: @unchecked Sendable {
    public let utf8: UnsafeRawBufferPointer

    @inlinable
    public init(_ utf8: UnsafeRawBufferPointer) { self.utf8 = utf8 }

    /// The text as a String (a copy).
    public var string: String { String(decodingLogText: utf8) }

    /// Whether `self` and `other` are the same text.
    @inlinable
    public func equals(_ other: UnsafeRawBufferPointer) -> Bool {
        utf8.count == other.count && (utf8.isEmpty || memcmp(utf8.baseAddress!, other.baseAddress!, utf8.count) == 0)
    }

    /// Whether this is `s`'s text.
    public func equals(_ s: String) -> Bool { s.withUTF8Bytes { equals($0) } }
}

/// An event's body as the fold takes it: device_ids and tokens as text held elsewhere.
public typealias FoldBody = EventBodyOf<NameText>

/// A log record as a rebuild's log reader hands it to the fold: its names'
/// text in the `NameArena` of the chunk it was read in, which must outlive it.
public struct FoldRecord: Sendable {
    public var sequence: UInt64
    public var timestamp: Int64
    public var project: String
    public var body: FoldBody

    public init(sequence: UInt64, timestamp: Int64, project: String, body: FoldBody) {
        self.sequence = sequence
        self.timestamp = timestamp
        self.project = project
        self.body = body
    }

    /// `record` with its names copied into `arena`.
    public init(_ record: LogRecord, names arena: NameArena) {
        self.init(sequence: record.sequence, timestamp: record.timestamp, project: record.event.project,
                  body: record.event.body.mapNames { arena.text(copying: $0) })
    }

    /// The record with its names as Strings.
    public var logRecord: LogRecord {
        LogRecord(sequence: sequence, timestamp: timestamp, event: Event(project: project, body: body.mapNames { $0.string }))
    }
}

/// Holds the text of the device_ids and tokens of a run of log records (a
/// rebuild's chunk) in large blocks, spelled out from their stored form once:
/// a String each was a heap allocation made by the log reader and freed after
/// the fold, with a UTF-8 check, a fifth of the reader's work (callgrind).
/// What it hands out stays where it is until the arena is freed.
public final class NameArena: @unchecked Sendable {
    /// Bytes a block holds (a longer name gets a block of its own).
    static let blockSize = 256 << 10
    private var blocks: [UnsafeMutableRawPointer] = []
    private var next: UnsafeMutableRawPointer?
    private var room = 0

    public init() {}

    deinit { for b in blocks { b.deallocate() } }

    /// `n` bytes, stable until the arena is freed.
    private func take(_ n: Int) -> UnsafeMutableRawPointer {
        if n > room {
            let size = max(n, Self.blockSize)
            let block = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
            blocks.append(block)
            next = block
            room = size
        }
        let p = next!
        next = p + n
        room -= n
        return p
    }

    /// The text of `name` (a record's stored name) held here; a name stored as
    /// text is repaired as `String(decoding:as:)` repairs it when it is not UTF-8.
    package func text(of name: StoredName) -> NameText {
        if name.form == .text { return text(copying: name.payload) }
        return text(spelling: name)
    }

    private func text(spelling name: StoredName) -> NameText {
        let n = name.textCount
        let p = take(n)
        name.writeText(to: p)
        return NameText(UnsafeRawBufferPointer(start: p, count: n))
    }

    /// A copy of `utf8` held here, repaired as `String(decoding:as:)` repairs it when it is not UTF-8.
    package func text(copying utf8: UnsafeRawBufferPointer) -> NameText {
        guard utf8.allSatisfy({ $0 < 0x80 }) else { return text(copying: String(decoding: utf8, as: UTF8.self)) }
        return copy(utf8)
    }

    /// A copy of `s`'s text held here.
    public func text(copying s: String) -> NameText { s.withUTF8Bytes { copy($0) } }

    /// A copy of `utf8`, which is UTF-8 already.
    private func copy(_ utf8: UnsafeRawBufferPointer) -> NameText {
        let p = take(utf8.count)
        if !utf8.isEmpty { p.copyMemory(from: utf8.baseAddress!, byteCount: utf8.count) }
        return NameText(UnsafeRawBufferPointer(start: p, count: utf8.count))
    }
}
