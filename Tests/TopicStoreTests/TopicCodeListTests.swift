@testable import Projections
import Testing

/// Topic codes kept as their bytes back to back (`TopicCodeList`): each code
/// read back as it went in, empty and non-ASCII ones included.
@Suite struct TopicCodeListTests {
    @Test func codesReadBackAsTheyWentIn() {
        let codes = ["news", "", "user.12", "é漢🚀", "a", "", "x,y", String(repeating: "z", count: 300)]
        for n in 0...codes.count {
            let prefix = Array(codes.prefix(n))
            let list = TopicCodeList(prefix)
            #expect(list.count == n && list.isEmpty == (n == 0))
            #expect(list.strings == prefix)
            for (i, code) in prefix.enumerated() {
                #expect(list.string(at: i) == code)
                #expect(list.withCode(at: i) { Array($0) } == Array(code.utf8))
            }
            // Appended one by one as bytes: the same list.
            var appended = TopicCodeList()
            for code in prefix { Array(code.utf8).withUnsafeBytes { appended.append($0) } }
            #expect(appended == list)
        }
        #expect(TopicCodeList(["ab", "c"]) != TopicCodeList(["a", "bc"]), "the same bytes cut elsewhere")
        #expect(TopicCodeList(["ab"]) != TopicCodeList(["ab", ""]) && TopicCodeList([""]) != TopicCodeList())
    }

    /// Codes cut from bytes appended once (a query's value) are the codes those
    /// places hold, equal to the same codes appended one by one.
    @Test func codesCutFromAppendedBytes() {
        var list = TopicCodeList()
        Array("first".utf8).withUnsafeBytes { list.append($0) }
        let value = Array(" news ,user.7,,é漢 ".utf8)
        let base = value.withUnsafeBytes { list.appendBytes($0) }
        #expect(list.count == 1, "appended bytes are no code")
        for range in [1..<5, 7..<13, 13..<13, 15..<value.count - 1, 0..<value.count] {
            list.appendCode(base + range.lowerBound ..< base + range.upperBound)
        }
        let expected = ["first", "news", "user.7", "", "é漢", " news ,user.7,,é漢 "]
        #expect(list.strings == expected)
        #expect(list == TopicCodeList(expected))
        var seen: [String] = []
        list.forEachCode { i, code in
            #expect(i == seen.count)
            seen.append(String(decoding: code, as: UTF8.self))
        }
        #expect(seen == expected)
    }
}
