/// Topic codes as ranges of UTF-8 bytes, as an HTTP request carries a send
/// service's list of users: the serving caches count such a list without a
/// Swift `String` made of each code. (Made, checked and read back
/// as Strings, the 100 codes of a list were a third of the server's
/// instructions for its count.)
public struct TopicCodeList: Sendable, Equatable, CustomStringConvertible {
    /// The bytes the codes are cut from.
    private var bytes: [UInt8] = []
    /// Where each code is in `bytes`.
    private var spans: [Range<Int>] = []

    public init() {}

    /// The codes' bytes copied into one array made at its size (appended one
    /// by one, a posted list of 100 cost more than its Strings saved later).
    public init(_ codes: [String]) {
        var total = 0
        for code in codes { total += code.utf8.count }
        var spans: [Range<Int>] = []
        spans.reserveCapacity(codes.count)
        bytes = [UInt8](unsafeUninitializedCapacity: total) { buffer, initialized in
            var at = 0
            for code in codes {
                code.withUTF8Bytes { b in
                    precondition(at + b.count <= total, "a code's bytes changed while copied")
                    if let source = b.baseAddress, let target = buffer.baseAddress {
                        UnsafeMutableRawPointer(target + at).copyMemory(from: source, byteCount: b.count)
                    }
                    spans.append(at..<at + b.count)
                    at += b.count
                }
            }
            initialized = at
        }
        self.spans = spans
    }

    /// The number of codes.
    public var count: Int { spans.count }
    public var isEmpty: Bool { spans.isEmpty }

    /// Appends a code's UTF-8 bytes.
    public mutating func append(_ code: UnsafeRawBufferPointer) {
        let start = appendBytes(code)
        spans.append(start..<bytes.count)
    }

    /// Appends `source` to the bytes codes are cut from, and returns where it
    /// begins: codes are then cut from it with `appendCode(_:)`. (A query's
    /// whole value is copied once, where each code copied alone cost more than
    /// the copy.)
    public mutating func appendBytes(_ source: UnsafeRawBufferPointer) -> Int {
        let start = bytes.count
        bytes.append(contentsOf: source.bindMemory(to: UInt8.self))
        return start
    }

    /// Makes room for `codes` more codes.
    public mutating func reserveCodes(_ codes: Int) {
        spans.reserveCapacity(spans.count + codes)
    }

    /// Appends the code at `range` of the bytes appended so far.
    public mutating func appendCode(_ range: Range<Int>) {
        precondition(range.lowerBound >= 0 && range.upperBound <= bytes.count, "code outside the list's bytes")
        spans.append(range)
    }

    /// Calls `body` with the bytes of code `i`.
    public func withCode<R>(at i: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try withNames { try body($0.name(i)) }
    }

    /// Calls `body` with each code's index and bytes, in order (the list read once).
    public func forEachCode(_ body: (Int, UnsafeRawBufferPointer) throws -> Void) rethrows {
        try withNames { names in
            for i in 0..<names.count { try body(i, names.name(i)) }
        }
    }

    /// Code `i` as a String.
    public func string(at i: Int) -> String {
        withCode(at: i) { String(decoding: $0, as: UTF8.self) }
    }

    /// The codes as Strings (for a count the serving caches do not answer).
    public var strings: [String] { (0..<count).map(string(at:)) }

    public var description: String { strings.description }

    /// The same codes in the same order (whatever bytes they were cut from).
    public static func == (a: TopicCodeList, b: TopicCodeList) -> Bool {
        a.count == b.count && a.withNames { x in b.withNames { y in (0..<x.count).allSatisfy { x.name($0).elementsEqual(y.name($0)) } } }
    }

    /// Calls `body` with the codes read in place.
    func withNames<R>(_ body: (PackedNames) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes { b in try spans.withUnsafeBufferPointer { s in try body(PackedNames(bytes: b, spans: s)) } }
    }
}

/// Names a lookup reads one by one by index (`NameIndex.lookupEach`): the
/// caller's Strings, or a `TopicCodeList`'s bytes.
protocol NameList {
    var count: Int { get }
    /// Calls `body` with the UTF-8 bytes of name `i`.
    func withName<R>(_ i: Int, _ body: (UnsafeRawBufferPointer) -> R) -> R
    /// Name `i` as `NameIndex.shortWords` reads it, with its byte count, when
    /// that is at hand without `withName`; nil otherwise.
    func shortWords(_ i: Int) -> (words: (UInt64, UInt64), count: Int)?
    /// The names as an array's String values, where `topicstore_gather_held_strings`
    /// reads small ones as `String.smallUTF8Words` does; nil when they are not
    /// Strings, or on a platform where that reading does not hold.
    var stringValues: UnsafeRawPointer? { get }
}

extension NameList {
    /// Name `i` as `NameIndex.shortWords` reads it, with its byte count, when
    /// it has at most `NameIndex.inlineName` bytes (a name its slot holds);
    /// nil for a longer one.
    @inline(__always)
    func inlineWords(_ i: Int) -> (words: (UInt64, UInt64), count: Int)? {
        if let (words, count) = shortWords(i) { return count <= NameIndex.inlineName ? (words, count) : nil }
        return withName(i) { name in
            guard name.count <= NameIndex.inlineName else { return nil }
            guard let base = name.baseAddress else { return ((0, 0), 0) }
            return (NameIndex.shortWords(base, name.count), name.count)
        }
    }
}

/// Strings read in place from their array's memory (no array retained per name).
struct StringNames: NameList {
    let strings: UnsafeBufferPointer<String>
    var count: Int { strings.count }

    @inline(__always)
    func withName<R>(_ i: Int, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        strings[i].withUTF8Bytes(body)
    }

    /// A small string's bytes, from the String value itself.
    @inline(__always)
    func shortWords(_ i: Int) -> (words: (UInt64, UInt64), count: Int)? {
        strings[i].smallUTF8Words
    }

    var stringValues: UnsafeRawPointer? {
        #if _pointerBitWidth(_64) && _endian(little)
        UnsafeRawPointer(strings.baseAddress)
        #else
        nil
        #endif
    }
}

/// A `TopicCodeList`'s codes read in place.
struct PackedNames: NameList {
    let bytes: UnsafeRawBufferPointer
    let spans: UnsafeBufferPointer<Range<Int>>
    var count: Int { spans.count }

    @inline(__always)
    func name(_ i: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: bytes[spans[i]])
    }

    @inline(__always)
    func withName<R>(_ i: Int, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        body(name(i))
    }

    /// nil: `lookupEach` reads a code's bytes in place through `withName`.
    @inline(__always)
    func shortWords(_ i: Int) -> (words: (UInt64, UInt64), count: Int)? { nil }

    var stringValues: UnsafeRawPointer? { nil }
}
