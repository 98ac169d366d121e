@testable import Projections
import Testing

/// The in-memory name table of the writer, the rebuild and the topic
/// directory (`NameIndex`): its hash of a name reads the last bytes with
/// whole loads, and must equal the hash of those bytes read one by one, for
/// every length and wherever the name sits in memory.
@Suite struct NameIndexTests {
    /// The hash as defined: 8-byte words, then the last 0-7 bytes as a
    /// little-endian word, assembled byte by byte.
    static func referenceHash(_ name: [UInt8]) -> UInt64 {
        var h = UInt64(name.count) &* 0xD6E8_FEB8_6659_FD93
        var i = 0
        while i + 8 <= name.count {
            var word: UInt64 = 0
            for k in 0..<8 { word |= UInt64(name[i + k]) << (8 * k) }
            h = (h ^ word) &* 0xBF58_476D_1CE4_E5B9
            h ^= h >> 29
            i += 8
        }
        var tail: UInt64 = 0
        for k in i..<name.count { tail |= UInt64(name[k]) << (8 * (k - i)) }
        return (h ^ tail) &* 0xBF58_476D_1CE4_E5B9
    }

    @Test func hashOfEveryLengthAndPlacementIsTheBytewiseOne() {
        var rng = SeededRandom(seed: 1)
        for length in 0...40 {
            for _ in 0..<20 {
                let name = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
                // The name at each offset of a buffer with bytes on both sides that must not count.
                for offset in 0..<8 {
                    let buffer = (0..<offset).map { _ in UInt8.random(in: 0...255, using: &rng) } + name
                        + (0..<8).map { _ in UInt8.random(in: 0...255, using: &rng) }
                    let hash = buffer.withUnsafeBytes { NameIndex.nameHash(UnsafeRawBufferPointer(rebasing: $0[offset..<offset + length])) }
                    #expect(hash == Self.referenceHash(name), "length \(length) at offset \(offset)")
                }
            }
        }
    }

    /// Names of every short length (whose last bytes are read in the
    /// different ways) and some longer than `lookupEach` keeps aside, in two
    /// projects, set, replaced, removed and looked up against a dictionary;
    /// the table grows on the way. `lookupEach` answers in groups of
    /// `lookaheadGroup`, in order, and stops where its body says.
    @Test func lookupsMatchADictionary() {
        let index = NameIndex()
        var model: [String: UInt32] = [:]
        var rng = SeededRandom(seed: 2)
        let letters = Array("abcdefghijklmnopqrstuvwxyz0123456789._")
        func key(_ pid: UInt32, _ name: String) -> String { "\(pid)/\(name)" }
        var names: [String] = []
        for _ in 0..<3_000 {
            let length = Int.random(in: 0..<10, using: &rng) == 0 ? Int.random(in: 25...48, using: &rng) : Int.random(in: 0...24, using: &rng)
            names.append(String((0..<length).map { _ in letters.randomElement(using: &rng)! }))
        }
        for step in 0..<20_000 {
            let pid = UInt32.random(in: 1...2, using: &rng)
            let name = names.randomElement(using: &rng)!
            if Int.random(in: 0..<5, using: &rng) == 0 {
                index.set(pid, name, nil)
                model[key(pid, name)] = nil
            } else {
                let value = UInt32(step)
                index.set(pid, name, value)
                model[key(pid, name)] = value
            }
        }
        for pid: UInt32 in 1...3 {
            for name in names {
                let found = index.lookup(pid, name)
                #expect(found.flatMap { $0 } == model[key(pid, name)], "\(pid)/\(name)")
            }
            var each: [UInt32?] = []
            var order: [Int] = []
            index.lookupEach(pid, names) { n, answer in order.append(n); each.append(answer.flatMap { $0 }); return true }
            #expect(each == names.map { model[key(pid, $0)] })
            #expect(order == Array(names.indices))
            let stop = NameIndex.lookaheadGroup + 3
            order = []
            index.lookupEach(pid, names) { n, _ in order.append(n); return n < stop }
            #expect(order == Array(0...stop), "stops where the body says")
        }
    }
}
