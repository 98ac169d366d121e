@testable import Projections
import Testing

/// The keys built on the stack (`Keys.withPair`, `Keys.withChunk`, `Keys.withNamed`)
/// are byte for byte the keys the readers build as arrays: a difference would
/// make the writer read and write entries nobody else finds.
@Suite struct KeysTests {
    @Test func stackKeysEqualArrayKeys() {
        let values: [UInt32] = [0, 1, 0xFF, 0x100, 0x1234_5678, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFE, .max]
        let highs: [UInt16] = [0, 1, 0xFF, 0x100, 0x7FFF, 0x8000, .max]
        for pid in values {
            for a in values {
                Keys.withPair(pid, a) { #expect(Array($0) == Keys.pair(pid, a)) }
                for high in highs {
                    Keys.withChunk(pid, a, high) { #expect(Array($0) == Keys.chunk(pid, a, high)) }
                }
            }
        }
        let names = ["", "a", "news", "user.123456789012", String(repeating: "x", count: 128), String(repeating: "x", count: 129),
                     String(repeating: "x", count: 255), "caf\u{E9}", "\u{1F4F1}.topic"]
        for pid in values {
            for name in names {
                for order in [ProjectionTables.TopicCodeOrder.bytewise, .byLength] {
                    let key = Keys.code(pid, name, order)
                    #expect(Keys.withCode(pid, name, order) { Array($0) } == key)
                    let n = name.utf8.count
                    if order == .byLength && (n == 0 || n > 128) { #expect(key == nil); continue }
                    let expected = withUnsafeBytes(of: pid.bigEndian) { Array($0) }
                        + (order == .byLength ? [UInt8(0x7F + n)] : []) + Array(name.utf8)
                    #expect(key == expected)
                    // A key says which form it is in (ASCII codes: every valid one).
                    if name.utf8.allSatisfy({ $0 < 0x80 }) {
                        let decoded = try? #require(key).withUnsafeBytes { k in Keys.codeBytes(ofKey: k).map { (Array($0.code), $0.order) } }
                        #expect(decoded?.0 == Array(name.utf8) && decoded?.1 == order)
                    }
                }
            }
        }
    }

    /// Schema 11's code keys put a project's codes in order of length, then of
    /// bytes, and the projects in order of their ids; codes counted up in
    /// order are keys in ascending order (LMDB appends them, filling pages).
    @Test func lengthFirstCodeKeysSortByProjectLengthThenBytes() throws {
        let codes = ["b", "ab", "aa", "user.9", "user.10", "user.100", "user.11", "zz", "a", "user.1000000", "user.999999"]
        var keys: [(pid: UInt32, code: String, key: [UInt8])] = []
        for pid: UInt32 in [2, 1, 0x0100_0000] {
            for code in codes { keys.append((pid, code, try #require(Keys.code(pid, code, .byLength)))) }
        }
        let byKey = keys.sorted { $0.key.lexicographicallyPrecedes($1.key) }.map { "\($0.pid) \($0.code)" }
        let expected = keys.sorted { a, b in
            if a.pid != b.pid { return a.pid < b.pid }
            if a.code.utf8.count != b.code.utf8.count { return a.code.utf8.count < b.code.utf8.count }
            return a.code.utf8.lexicographicallyPrecedes(b.code.utf8)
        }.map { "\($0.pid) \($0.code)" }
        #expect(byKey == expected)
        let counted = (99_990..<100_020).map { try! #require(Keys.code(1, "user.\($0)", .byLength)) }
        #expect(counted == counted.sorted { $0.lexicographicallyPrecedes($1) })
    }
}
