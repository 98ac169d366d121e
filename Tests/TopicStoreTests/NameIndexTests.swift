@testable import Projections
import SubscriptionLog
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
                // As a String (a small one read from a copy, a longer one in place): the same hash.
                let text = name.map { $0 & 0x7F }
                let string = String(decoding: text, as: UTF8.self)
                #expect(NameIndex.nameHash(string) == Self.referenceHash(text), "length \(length) as a String")
                let nonASCII = "é" + String(decoding: text.prefix(max(0, length - 2)), as: UTF8.self)
                #expect(NameIndex.nameHash(nonASCII) == Self.referenceHash(Array(nonASCII.utf8)), "\(nonASCII)")
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
            // The same names as bytes (a request's list): a small String is set
            // from its words and a packed name looked up from its bytes, and
            // both must reach the same slot.
            var packed: [UInt32?] = []
            index.lookupEach(pid, packed: names) { _, answer in packed.append(answer.flatMap { $0 }); return true }
            #expect(packed == names.map { model[key(pid, $0)] })
            let stop = NameIndex.lookaheadGroup + 3
            order = []
            index.lookupEach(pid, names) { n, _ in order.append(n); return n < stop }
            #expect(order == Array(0...stop), "stops where the body says")
        }
    }

    /// A short name is compared as two words (`shortWords`): for every length
    /// up to `shortName` and wherever the name sits, equal bytes give equal
    /// words, and a name that differs in any one byte gives different words;
    /// the hash taken from the words is the name's hash.
    @Test func shortWordsTellEveryByte() {
        var rng = SeededRandom(seed: 3)
        for length in 0...NameIndex.shortName {
            for _ in 0..<20 {
                let name = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
                var expected: (UInt64, UInt64) = (0, 0)
                for (k, b) in name.enumerated() {
                    if k < 8 { expected.0 |= UInt64(b) << (8 * k) } else { expected.1 |= UInt64(b) << (8 * (k - 8)) }
                }
                for offset in 0..<8 {
                    let buffer = (0..<offset).map { _ in UInt8.random(in: 0...255, using: &rng) } + name
                        + (0..<8).map { _ in UInt8.random(in: 0...255, using: &rng) }
                    let words = buffer.withUnsafeBytes { NameIndex.shortWords($0.baseAddress! + offset, length) }
                    #expect(words == expected, "length \(length) at offset \(offset)")
                    // A short name's hash taken from its words, as the lookups take it, is its hash.
                    #expect(NameIndex.nameHash(shortWords: words, count: length) == Self.referenceHash(name),
                            "length \(length) at offset \(offset)")
                }
                for position in 0..<length {
                    var other = name
                    other[position] ^= UInt8.random(in: 1...255, using: &rng)
                    let (a, b) = (name.withUnsafeBytes { NameIndex.shortWords($0.baseAddress!, length) },
                                  other.withUnsafeBytes { NameIndex.shortWords($0.baseAddress!, length) })
                    #expect(a != b, "length \(length), byte \(position) changed")
                }
            }
        }
    }

    /// Names whose hashes share the tag a slot keeps (its high 32 bits), of
    /// one length and project: only their bytes tell them apart, and each is
    /// found with its own value, one by one and by `lookupEach`: short, of 16
    /// bytes whose first 8 are the same, and long.
    @Test func namesWithTheSameTagAreToldApartByTheirBytes() {
        for (prefix, width) in [("n", 8), ("user.", 7), ("users.", 7), ("topic.u.", 8), ("long.topic.code.", 8)] {
            var byTag: [UInt32: String] = [:]
            var pairs: [(String, String)] = []
            var i = 0
            while pairs.count < 4 {
                let digits = String(i)
                let name = prefix + String(repeating: "0", count: width - digits.count) + digits
                let tag = name.withUTF8Bytes { UInt32(truncatingIfNeeded: NameIndex.hash(7, $0) >> 32) }
                if let first = byTag[tag] { pairs.append((first, name)) } else { byTag[tag] = name }
                i += 1
            }
            let index = NameIndex()
            var values: [String: UInt32] = [:]
            for (k, (a, b)) in pairs.enumerated() {
                index.set(7, a, UInt32(2 * k + 1))
                index.set(7, b, UInt32(2 * k + 2))
                (values[a], values[b]) = (UInt32(2 * k + 1), UInt32(2 * k + 2))
            }
            let names = pairs.flatMap { [$0.0, $0.1] }
            for name in names { #expect(index.lookup(7, name) == .some(values[name]), "\(name)") }
            var each: [UInt32?] = []
            index.lookupEach(7, names) { _, answer in each.append(answer.flatMap { $0 }); return true }
            #expect(each == names.map { values[$0] })
            // Removing one name leaves the other of its tag as it was.
            index.set(7, pairs[0].0, nil)
            #expect(index.lookup(7, pairs[0].0) == .some(nil) && index.lookup(7, pairs[0].1) == .some(values[pairs[0].1]))
        }
    }

    /// Names held in their slot (at most `inlineName` bytes) are compared
    /// there in two words: two 12-byte names of one tag whose first 8 bytes are
    /// the same differ only in the slot's second word, and each is found with
    /// its own value; a 13-byte name with the same first 12 bytes is a
    /// different name.
    @Test func namesHeldInTheirSlotAreToldApartByEveryByte() {
        #expect(NameIndex.inlineName == 12)
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789")
        var byTag: [UInt32: String] = [:]
        var pair: (String, String)?
        var i = 0
        while pair == nil {
            var n = i, suffix = ""
            for _ in 0..<4 { suffix.append(alphabet[n % alphabet.count]); n /= alphabet.count }
            let name = "user.ab." + suffix
            let tag = name.withUTF8Bytes { UInt32(truncatingIfNeeded: NameIndex.hash(3, $0) >> 32) }
            if let first = byTag[tag] { pair = (first, name) } else { byTag[tag] = name }
            i += 1
        }
        let (a, b) = pair!
        #expect(a.utf8.count == 12 && b.utf8.count == 12 && a.prefix(8) == b.prefix(8) && a != b)
        let index = NameIndex()
        index.set(3, a, 1)
        #expect(index.lookup(3, b) == nil, "\(b) is not \(a)")
        index.set(3, b, 2)
        index.set(3, a + "x", 3)
        for (name, value) in [(a, 1), (b, 2), (a + "x", 3)] as [(String, UInt32)] {
            #expect(index.lookup(3, name) == .some(value), "\(name)")
        }
        var each: [UInt32?] = []
        index.lookupEach(3, [b, a, a + "x", a + "y"]) { _, answer in each.append(answer.flatMap { $0 }); return true }
        #expect(each == [2, 1, 3, nil])
    }

    /// The write-out's walk: every entry once, removed ones with no value, in
    /// LMDB's key order in either form of `topic_codes` keys (big-endian pid,
    /// then the name's bytes, a prefix before its extensions; or, since schema
    /// 11, with the name's length before them); and `removeAll` leaves an empty
    /// index that takes names again, its memory back to where it began.
    @Test func entriesComeOutInKeyOrderAndRemoveAllStartsAfresh() throws {
        let index = NameIndex()
        let empty = index.footprint
        var model: [[UInt8]: UInt32?] = [:]
        var rng = SeededRandom(seed: 7)
        func letters(_ n: Int) -> String {
            String((0..<n).map { _ in Character(UnicodeScalar(UInt8.random(in: 97...100, using: &rng))) })
        }
        // Half the names are prefixes of three long ones: names that share
        // their first 16 bytes (past the sort's two words) and end apart.
        let stems = (0..<3).map { _ in letters(40) }
        for step in 0..<5_000 {
            let pid = UInt32.random(in: 1...300, using: &rng)
            let length = Int.random(in: 1...40, using: &rng)
            let name = step % 2 == 0 ? String(stems[step % 3].prefix(length)) : letters(length)
            let value: UInt32? = step % 7 == 0 ? nil : UInt32(step)
            index.set(pid, name, value)
            var key = withUnsafeBytes(of: pid.bigEndian) { Array($0) }
            key += Array(name.utf8)
            model[key] = .some(value)
        }
        var walked: [([UInt8], UInt32?)] = []
        try index.forEach(in: index.sortedSlots(.bytewise), .bytewise) { key, value in walked.append((Array(key), value)) }
        let expected = model.sorted { $0.key.lexicographicallyPrecedes($1.key) }
        #expect(walked.map(\.0) == expected.map(\.key))
        #expect(walked.map(\.1) == expected.map { $0.value ?? nil })
        walked = []
        try index.forEach(in: index.sortedSlots(.byLength), .byLength) { key, value in walked.append((Array(key), value)) }
        let byLength = model.map { key, value in (Array(key[0..<4]) + [UInt8(0x7F + key.count - 4)] + Array(key[4...]), value) }
            .sorted { $0.0.lexicographicallyPrecedes($1.0) }
        #expect(walked.map(\.0) == byLength.map(\.0))
        #expect(walked.map(\.1) == byLength.map { $0.1 ?? nil })
        #expect(index.footprint > empty)

        index.removeAll()
        #expect(index.isEmpty && index.nameBytes == 0 && index.footprint == empty)
        #expect(index.lookup(1, "abc") == nil)
        index.set(1, "abc", 5)
        #expect(index.lookup(1, "abc") == .some(5) && index.count == 1)
    }
}

/// The tests' way to ask `lookupEach`: Strings, each answer to a closure.
extension NameIndex {
    func lookupEach(_ pid: UInt32, _ names: [String], _ body: (Int, UInt32??) -> Bool) {
        withoutActuallyEscaping(body) { body in
            var visitor = ClosureVisitor(body: body)
            names.withUnsafeBufferPointer { lookupEach(pid, StringNames(strings: $0), &visitor) }
        }
    }

    /// `lookupEach` of the names as a request's list carries them: bytes, packed.
    func lookupEach(_ pid: UInt32, packed names: [String], _ body: (Int, UInt32??) -> Bool) {
        withoutActuallyEscaping(body) { body in
            var visitor = ClosureVisitor(body: body)
            TopicCodeList(names).withNames { lookupEach(pid, $0, &visitor) }
        }
    }
}

/// A closure as a `NameLookupVisitor`.
private struct ClosureVisitor: NameLookupVisitor {
    let body: (Int, UInt32??) -> Bool
    mutating func visit(_ i: Int, _ answer: UInt32??) -> Bool { body(i, answer) }
}
