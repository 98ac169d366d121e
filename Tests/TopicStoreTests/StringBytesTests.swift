import Foundation
import SubscriptionLog
import Testing

/// `String.withUTF8Bytes` hands over a string's UTF-8 bytes, read in place or from a copy.
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
}
