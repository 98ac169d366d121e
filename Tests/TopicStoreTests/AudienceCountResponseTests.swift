import Foundation
@testable import MPushAPI
@testable import Projections
import SubscriptionLog
import Testing

/// The audience count's answer, written by hand (`AudienceCountJSON`); the
/// query's topics, split at the comma's byte and trimmed without Foundation where
/// nothing needs trimming (`MPushService.appendCommaSeparated`, `trimmedRange`), kept as
/// bytes (`TopicCodeList`); a list's
/// `expr` written from its codes (`AudienceExpression.description(ofAnyOf:)`):
/// each the same as what it replaces.
@Suite struct AudienceCountResponseTests {
    /// What `APIResponse.json` wrote with `JSONSerialization` before.
    static func serialized(project: String, _ c: AudienceCounts, expr: String) throws -> [UInt8] {
        let object: [String: Any] = ["project": project, "asOfSeq": c.asOfSeq, "total": c.total, "ios": c.ios,
                                     "android": c.android, "withoutToken": c.withoutToken,
                                     "unknownTopics": c.unknownTopics, "expr": expr]
        return Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
    }

    @Test func theCountsAnswerIsWhatJSONSerializationWrote() throws {
        let counts = [
            AudienceCounts(asOfSeq: 0, total: 0, ios: 0, android: 0, withoutToken: 0, unknownTopics: []),
            AudienceCounts(asOfSeq: 2_289_400, total: 97, ios: 61, android: 34, withoutToken: 2, unknownTopics: ["ghost"]),
            AudienceCounts(asOfSeq: UInt64(Int64.max), total: 1 << 40, ios: 3, android: 4, withoutToken: 5,
                           unknownTopics: ["a", "b.c", "z-9", "user.12"]),
            // Every digit count at a power of ten's edge (the numbers are written by hand).
            AudienceCounts(asOfSeq: .max, total: 1_000_000_009, ios: 10, android: 99, withoutToken: 100, unknownTopics: []),
            AudienceCounts(asOfSeq: 9, total: Int.max, ios: 999_999, android: 1_000_000, withoutToken: 1, unknownTopics: []),
        ]
        let plain = ["news", "(user.1 OR user.2 OR user.3)", "((t1 OR t2) AND NOT user.5 AND platform:ios)", "devices:all",
                     "a/b", "\"and\" OR news"]
        for c in counts {
            for expr in plain {
                // Byte for byte, where neither writer escapes anything but quotes.
                #expect(AudienceCountJSON.encode(project: "app", c, expr: expr) == (try Self.serialized(project: "app", c, expr: expr)),
                        "\(expr)")
            }
        }
        // Text that needs escaping: the same JSON value (the two may spell an escape differently).
        for expr in ["a\\b", "tab\there", "line\nbreak", "\u{1}\u{1F}", "é ü 漢字 🚀", "\u{2028}\u{2029}", "\u{7F}"] {
            for project in ["app", "pro\"ject"] {
                let mine = try JSONSerialization.jsonObject(with: Data(AudienceCountJSON.encode(project: project, counts[1], expr: expr)))
                let theirs = try JSONSerialization.jsonObject(with: Data(try Self.serialized(project: project, counts[1], expr: expr)))
                #expect((mine as? NSDictionary) == (theirs as? NSDictionary), "\(expr.unicodeScalars.map(\.value))")
                #expect((mine as? [String: Any])?["expr"] as? String == expr)
            }
        }
    }

    @Test func topicsAreTrimmedAsFoundationTrimsThem() {
        let items = ["news", " news", "news ", "\tnews\t", " ", "", "\t", "a", "user.12", "\u{3000}news", "news\u{00A0}",
                     " \u{301}news", "news \u{301}", "\u{3000}\u{3000}", " \t\u{2003} ", "é\u{3000}é",
                     "\u{2003}", "news\n", "\nnews", "\u{7F}", "\u{7F}news\u{7F}", "é", "éa", "aé", "a b", " a b ",
                     "\u{1680}x\u{202F}", "~", "!news!"]
        for item in items {
            var bytes = item
            let trimmed = bytes.withUTF8 { b in
                MPushService.trimmedRange(b).map { String(decoding: UnsafeBufferPointer(rebasing: b[$0]), as: UTF8.self) } ?? ""
            }
            #expect(trimmed == item.trimmingCharacters(in: .whitespaces), "\(item.unicodeScalars.map(\.value))")
        }
    }

    /// What the query's `topics` became before: split by `Character`, each item
    /// trimmed as Foundation trims (what the trimming above is tested to equal).
    static func splitByCharacter(_ value: String) -> [String] {
        value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// The query's `topics` as the server now reads them: bytes appended to a list.
    static func commaSeparated(_ value: String) -> [String] {
        var list = TopicCodeList()
        MPushService.appendCommaSeparated(value, to: &list)
        return list.strings
    }

    @Test func topicsAreSplitAsTheCharacterSplitSplitThem() {
        let fixed = ["news", "news,sport", ",news,,sport,", " news , sport ", "", ",", ",,", " , ", "a,b,c",
                     "user.1,user.2,user.3", "\u{3000}news\u{3000},é,漢字", "café,thé", "\tnews\t,\nsport\n", "🚀,🚀🚀,"]
        for value in fixed {
            #expect(Self.commaSeparated(value) == Self.splitByCharacter(value), "\(value.unicodeScalars.map(\.value))")
        }
        // Random values over commas, spaces, tabs, letters and non-ASCII letters and spaces.
        let alphabet: [Character] = [",", ",", " ", "\t", "a", "b", ".", "1", "é", "\u{3000}", "漢", "\u{00A0}"]
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let value = String((0..<Int.random(in: 0...24, using: &rng)).map { _ in alphabet.randomElement(using: &rng)! })
            #expect(Self.commaSeparated(value) == Self.splitByCharacter(value), "\(value.unicodeScalars.map(\.value))")
        }
        // The one difference: a comma with a combining mark after it is one Character, but
        // still the comma's byte. Neither side is a valid topic code, so both are refused (422).
        #expect(Self.commaSeparated("news,\u{301}sport") == ["news", "\u{301}sport"])
        #expect(Self.splitByCharacter("news,\u{301}sport") == ["news,\u{301}sport"])
    }

    @Test func aListIsDescribedAsItsChainOfORsWas() {
        #expect(AudienceExpression.description(ofAnyOf: []) == nil)
        #expect(AudienceExpression.description(ofAnyOf: TopicCodeList()) == nil)
        let fixed: [[String]] = [["news"], ["and"], ["AND", "Or", "nOt"], ["café"], ["a b", "news"], ["user.1", "user.2"],
                                 ["\"quoted\""], ["andx", "nor", "no", "ánd", "ＡＮＤ"], ["platform:ios"], ["(x)"]]
        var rng = SystemRandomNumberGenerator()
        let pool = ["news", "t1", "user.12", "and", "OR", "Not", "é", "a b", "x,y", "all", "devices:all", "~@/+=#"]
        let random = (0..<300).map { _ in (0..<Int.random(in: 1...40, using: &rng)).map { _ in pool.randomElement(using: &rng)! } }
        for codes in fixed + random {
            let text = AudienceExpression.description(ofAnyOf: codes)
            #expect(text == AudienceExpression.anyOf(codes)!.description, "\(codes)")
            // The same codes as bytes (a list from the query) are described alike.
            #expect(AudienceExpression.description(ofAnyOf: TopicCodeList(codes)) == text, "\(codes)")
            // Codes the caller has checked: the same text without the charset checked again.
            if codes.allSatisfy(Validation.isValidTopicCode) {
                #expect(AudienceExpression.description(ofAnyOf: codes, allValid: true) == text, "\(codes)")
                #expect(AudienceExpression.description(ofAnyOf: TopicCodeList(codes), allValid: true) == text, "\(codes)")
            }
        }
    }

    @Test func keywordsAreKnownInAnyCaseWithoutLowercasing() {
        let words = ["and", "AND", "aNd", "or", "OR", "oR", "not", "NOT", "nOT", "", "a", "an", "andx", "xand", "nor", "no",
                     "note", "ánd", "ＡＮＤ", "and ", " or", "NOT\u{301}", "o", "orr", "\u{212A}"]
        for w in words {
            #expect(AudienceExpression.Parser.isKeyword(w) == ["and", "or", "not"].contains(w.lowercased()), "\(w)")
        }
    }
}
