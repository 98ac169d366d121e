@testable import HTTPServer
import Testing

/// Header names compared case-insensitively, as `lowercased()` compares them.
@Suite struct HTTPHeadersTests {
    static let pieces = ["a", "A", "z", "Z", "-", "_", "0", "@", "[", "`", "{", "é", "É", "ß", "İ", "ı", "Σ", "σ", "ς", "e\u{301}", "K", "k"]

    @Test func namesCompareAsTheirLowercasedFormsDo() {
        var random = SeededRandom(seed: 41)
        for _ in 0..<20_000 {
            let a = (0..<(1 + random.int(4))).map { _ in random.pick(Self.pieces) }.joined()
            // Often the same name in other cases, else another one.
            let b = random.int(2) == 0
                ? a.unicodeScalars.map { random.int(2) == 0 ? String($0) : String($0).uppercased() }.joined()
                : (0..<(1 + random.int(4))).map { _ in random.pick(Self.pieces) }.joined()
            let expected = a.utf8.count == b.utf8.count && a.lowercased() == b.lowercased()
            #expect(HTTPHeaders.same(a, b) == expected, "\(a) / \(b)")
        }
    }

    @Test func lookupsIgnoreCase() {
        let h = HTTPHeaders([("Content-Type", "application/json"), ("X-MPush-Token", "k1"), ("x-mpush-token", "k2"), ("Accept", "*/*")])
        #expect(h["content-type"] == "application/json")
        #expect(h["X-MPUSH-TOKEN"] == "k1")
        #expect(h.values("X-Mpush-Token") == ["k1", "k2"])
        #expect(h.contains("ACCEPT") && !h.contains("Accept-Encoding"))
        #expect(h["Accepts"] == nil && h["Accep"] == nil)
    }
}
