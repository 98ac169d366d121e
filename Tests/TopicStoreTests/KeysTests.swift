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
        let names = ["", "a", "news", "user.123456789012", String(repeating: "x", count: 255), "caf\u{E9}", "\u{1F4F1}.topic"]
        for pid in values {
            for name in names {
                Keys.withNamed(pid, name) { #expect(Array($0) == Keys.named(pid, name)) }
            }
        }
    }
}
