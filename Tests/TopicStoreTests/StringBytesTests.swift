import Foundation
import SubscriptionLog
import Testing

/// `String.withUTF8Bytes` hands over a string's UTF-8 bytes, read in place or
/// from a copy; `smallUTF8Words` a small string's, from the value itself.
@Suite struct StringBytesTests {
    static let strings: [String] = ["", "a", "user.1234567", "fifteen bytes!!", "sixteen bytes!!!", "é", "日本語のトピック",
                                    String(repeating: "x", count: 300), "🙂 with 🙂", String(NSString(string: "from NSString é")),
                                    String("substring of this"[...].dropFirst(3))]

    @Test func givesTheStringsBytesInPlaceOrFromACopy() {
        for s in Self.strings {
            #expect(s.withUTF8Bytes { Array($0) } == Array(s.utf8), "\(s)")
            #expect(s.withUTF8BytesOfACopy { Array($0) } == Array(s.utf8), "\(s)")
        }
        // Read from an array's memory, as a list of names is.
        Self.strings.withUnsafeBufferPointer { names in
            for i in names.indices { #expect(names[i].withUTF8Bytes { Array($0) } == Array(Self.strings[i].utf8)) }
        }
    }

    /// A small string's words are its bytes, little-endian, zero beyond them;
    /// every other string has none. Each length 0–20, ASCII and not, made
    /// every way a string is made here (a literal, appended to, decoded from
    /// bytes, from Foundation, a substring, read from an array).
    @Test func aSmallStringsWordsAreItsBytes() {
        var strings = Self.strings
        for n in 0...20 {
            let ascii = String((0..<n).map { Character(UnicodeScalar(UInt8(33 + ($0 * 7) % 94))) })
            strings += [ascii, String(decoding: Array(ascii.utf8), as: UTF8.self), String(NSString(string: ascii)),
                        String(("ab" + ascii).dropFirst(2))]
            var appended = "é"
            while appended.utf8.count < n { appended += "x" }
            strings.append(appended)
        }
        var small = 0
        strings.withUnsafeBufferPointer { names in
            for s in names {
                let bytes = Array(s.utf8)
                guard let (words, count) = s.smallUTF8Words else {
                    // Past 15 bytes Swift keeps no string in its value; a shorter one made here is small.
                    #expect(bytes.count > 15, "\(s)")
                    continue
                }
                small += 1
                #expect(count == bytes.count, "\(s)")
                var expected = [UInt8](repeating: 0, count: 16)
                expected.replaceSubrange(0..<bytes.count, with: bytes)
                let got = withUnsafeBytes(of: words.0.littleEndian) { Array($0) } + withUnsafeBytes(of: words.1.littleEndian) { Array($0) }
                #expect(got == expected, "\(s)")
            }
        }
        #expect(small > 60)
    }

    /// `String(decodingLogText:)` makes a String from two words for up to 15
    /// ASCII bytes: for every length 0–20 and wherever the bytes sit in a
    /// buffer (with bytes on both sides that must not count), the String is
    /// the one `String(decoding:as:)` makes: equal, with the same bytes, count,
    /// hash, and the same answers when compared, appended to and sliced.
    /// Bytes that are not ASCII (valid UTF-8 or not) give what it gives too.
    @Test func aLogTextIsTheStringDecodingGives() {
        var rng = SeededRandom(seed: 4)
        var cases: [[UInt8]] = [[], [0], [0x7F], Array("user.1234567".utf8), Array("é".utf8), [0xFF], [0x61, 0xC3],
                                Array("fifteen bytes!!".utf8), Array("sixteen bytes!!!".utf8)]
        for n in 0...20 {
            for _ in 0..<30 { cases.append((0..<n).map { _ in UInt8.random(in: 0...0x7F, using: &rng) }) }
            for _ in 0..<10 { cases.append((0..<n).map { _ in UInt8.random(in: 0...0xFF, using: &rng) }) }
        }
        for bytes in cases {
            for offset in 0..<8 {
                let buffer = (0..<offset).map { _ in UInt8.random(in: 0...0xFF, using: &rng) } + bytes
                    + (0..<8).map { _ in UInt8.random(in: 0...0xFF, using: &rng) }
                let (made, expected) = buffer.withUnsafeBytes { all in
                    let text = UnsafeRawBufferPointer(rebasing: all[offset..<offset + bytes.count])
                    return (String(decodingLogText: text), String(decoding: text, as: UTF8.self))
                }
                #expect(made == expected, "\(bytes) at offset \(offset)")
                #expect(Array(made.utf8) == Array(expected.utf8), "\(bytes)")
                #expect(made.utf8.count == expected.utf8.count && made.count == expected.count, "\(bytes)")
                #expect(made.hashValue == expected.hashValue, "\(bytes)")
                #expect(made + "x" == expected + "x", "\(bytes)")
                #expect(made.dropFirst() == expected.dropFirst(), "\(bytes)")
                #expect((made < "m") == (expected < "m"), "\(bytes)")
                #expect(made.unicodeScalars.map(\.value) == expected.unicodeScalars.map(\.value), "\(bytes)")
                if bytes.count <= 15, bytes.allSatisfy({ $0 < 0x80 }) {
                    // Made from its words: a small string, as the standard library makes it.
                    #expect(made.smallUTF8Words?.count == bytes.count, "\(bytes)")
                    #expect(unsafeBitCast(made, to: (UInt64, UInt64).self) == unsafeBitCast(expected, to: (UInt64, UInt64).self),
                            "\(bytes): the same bits as the standard library's")
                }
            }
        }
        // Empty, with no memory behind it.
        #expect(String(decodingLogText: UnsafeRawBufferPointer(start: nil, count: 0)) == "")
    }
}
