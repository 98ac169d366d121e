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
}
