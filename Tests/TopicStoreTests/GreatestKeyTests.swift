@testable import Projections
import Testing

/// `GreatestKey` says a key is absent from a table only when it sorts after
/// the table's greatest key in LMDB's order: a wrong "absent" would make the
/// writer create a second topic for a code the table holds.
@Suite struct GreatestKeyTests {
    /// LMDB's order: bytes as unsigned, a prefix before its extensions.
    static func sortsBefore(_ a: [UInt8], _ b: [UInt8]) -> Bool { a.lexicographicallyPrecedes(b) }

    @Test func nothingIsAbsentBeforeTheTableWasRead() {
        let key = GreatestKey()
        #expect(!key.precedes(UnsafeRawBufferPointer(start: nil, count: 0)))
        [UInt8]([1, 2, 3]).withUnsafeBytes { #expect(!key.precedes($0)) }
    }

    @Test func everyKeyIsAbsentFromAnEmptyTable() {
        var key = GreatestKey()
        key.read = true
        [UInt8]([0]).withUnsafeBytes { #expect(key.precedes($0)) }
        [UInt8]([0xFF, 0xFF]).withUnsafeBytes { #expect(key.precedes($0)) }
    }

    /// Keys of lengths 0…6 over a few byte values (prefixes, equal keys,
    /// bytes above 0x7F where a signed comparison errs) raised in random
    /// order: after each, `precedes` agrees with the greatest key so far for
    /// every probe.
    @Test func agreesWithTheGreatestKeyRaisedSoFar() {
        var rng = SystemRandomNumberGenerator()
        let alphabet: [UInt8] = [0x00, 0x01, 0x7F, 0x80, 0xFF]
        func randomKey() -> [UInt8] { (0..<Int.random(in: 0...6, using: &rng)).map { _ in alphabet.randomElement(using: &rng)! } }
        let probes = (0..<200).map { _ in randomKey() }
        for _ in 0..<50 {
            var key = GreatestKey()
            key.read = true
            var greatest: [UInt8]? = nil
            for _ in 0..<30 {
                let k = randomKey()
                k.withUnsafeBytes { key.raise(to: $0) }
                if greatest.map({ Self.sortsBefore($0, k) }) ?? true { greatest = k }
                for p in probes {
                    let expected = Self.sortsBefore(greatest!, p)
                    p.withUnsafeBytes { #expect(key.precedes($0) == expected, "greatest \(greatest!), probe \(p)") }
                }
            }
        }
    }
}
