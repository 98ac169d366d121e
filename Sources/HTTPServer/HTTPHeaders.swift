/// Header fields in the order they came, looked up by name in any case
/// (`x-mpush-token`, `X-MPush-Token` and `X-MPUSH-TOKEN` are one name).
public struct HTTPHeaders: Sendable, Sequence, ExpressibleByDictionaryLiteral {
    public typealias Element = (name: String, value: String)
    private var entries: [Element]

    public init(_ entries: [(String, String)] = []) {
        self.entries = entries.map { (name: $0.0, value: $0.1) }
    }

    /// Headers as they came, already named (no copy).
    init(entries: [Element]) {
        self.entries = entries
    }

    public init(dictionaryLiteral elements: (String, String)...) {
        self.init(elements)
    }

    /// The first value of `name`, case-insensitive.
    public subscript(name: String) -> String? {
        entries.first { Self.same($0.name, name) }?.value
    }

    /// Every value of `name` (a header sent twice gives two values).
    public func values(_ name: String) -> [String] {
        entries.filter { Self.same($0.name, name) }.map(\.value)
    }

    public func contains(_ name: String) -> Bool { entries.contains { Self.same($0.name, name) } }

    public mutating func add(_ name: String, _ value: String) { entries.append((name: name, value: value)) }

    /// Replaces every value of `name` with `value`.
    public mutating func set(_ name: String, _ value: String) {
        entries.removeAll { Self.same($0.name, name) }
        entries.append((name: name, value: value))
    }

    public var count: Int { entries.count }
    public func makeIterator() -> IndexingIterator<[Element]> { entries.makeIterator() }

    static func same(_ a: String, _ b: String) -> Bool {
        a.utf8.count == b.utf8.count && a.lowercased() == b.lowercased()
    }
}
