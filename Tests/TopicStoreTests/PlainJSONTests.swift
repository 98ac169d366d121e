import EventJSON
import Foundation
import SubscriptionLog
@testable import MPushAPI
import Testing

/// `PlainJSON` reads the plainest request bodies itself: whatever it reads, it
/// reads as `JSONSerialization` does, and whatever is not plain it leaves to it.
@Suite struct PlainJSONTests {
    /// A value's structure and strings, spelled out, for comparing what two readers made.
    static func canonical(_ v: Any) -> String {
        switch v {
        case let s as String: return "s(" + s.unicodeScalars.map { String($0.value) }.joined(separator: ",") + ")"
        case let o as [String: Any]:
            return "{" + o.keys.sorted().map { canonical($0) + ":" + canonical(o[$0]!) }.joined(separator: ",") + "}"
        case let a as [Any]: return "[" + a.map(canonical).joined(separator: ",") + "]"
        case is NSNull: return "null"
        // As the API reads them: `EventJSON.isBoolean` tells a Bool from a number.
        case let n as NSNumber: return EventJSON.isBoolean(n) ? "bool(\(n.boolValue))" : "number(\(n))"
        default: return "other(\(v))"
        }
    }

    static func serialized(_ text: String) -> Any? {
        try? JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])
    }

    @Test func plainBodiesAreReadAsJSONSerializationReadsThem() throws {
        let plain = [#"{"topics":["user.0","user.10007"]}"#, #"{}"#, #"[]"#, #""text""#, #"  { "a" : [ ] , "b" : { } }  "#,
                     #"{"device_id":"D1","topics":["news",{"code":"sport","title":"Sport"}]}"#,
                     "{\"a\":\"é 漢字 🚀\",\"b\":\"\"}", "\n\t{\"a\":[\"x\",\"y\",[\"z\"]]}\r\n",
                     #"[{"a":"1"},{"a":"2"}]"#, #"{"":""}"#, #"{"single":true,"other":false,"none":null}"#,
                     #"{"device_id":"D1","topics":[{"code":"all","title":"All Users","single":false},"news"]}"#,
                     "true", "[null, false]"]
        for text in plain {
            let mine = try #require(PlainJSON.value(Array(text.utf8)), "\(text)")
            let theirs = try #require(Self.serialized(text), "\(text)")
            #expect(Self.canonical(mine) == Self.canonical(theirs), "\(text)")
        }
    }

    /// An array of strings alone is kept a `[String]`, any other an `[Any]` (strings
    /// before the first other value kept in order); `topicSpecs` reads both the same.
    @Test func anArrayOfStringsIsKeptAsStrings() throws {
        let body = #"{"topics":["a","b.c"],"mixed":["a",{"code":"b"},"c"],"objects":[{"code":"x"}],"empty":[],"deep":[["a"],"b"]}"#
        let object = try #require(PlainJSON.value(Array(body.utf8)) as? [String: Any])
        #expect(type(of: object["topics"]!) == [String].self)
        #expect(type(of: object["empty"]!) == [String].self)
        #expect(type(of: object["mixed"]!) == [Any].self)
        #expect(type(of: object["objects"]!) == [Any].self)
        #expect(type(of: object["deep"]!) == [Any].self)
        #expect(Self.canonical(object["deep"]!) == "[[s(97)],s(98)]")
        var errors: [ValidationError] = []
        #expect(EventJSON.topicSpecs(object["topics"], into: &errors)?.map(\.code) == ["a", "b.c"])
        #expect(EventJSON.topicSpecs(["a", "b.c"] as [Any], into: &errors)?.map(\.code) == ["a", "b.c"])
        #expect(EventJSON.topicSpecs(object["mixed"], into: &errors)?.map(\.code) == ["a", "b", "c"])
        #expect(EventJSON.topicSpecs(object["empty"], into: &errors)?.isEmpty == true)
        #expect(errors.isEmpty)
    }

    @Test func anythingElseIsLeftToJSONSerialization() {
        let others = [#"{"limit":10}"#, #"{"single":tru}"#, #"{"a":nul}"#, #"{"a":True}"#, #"{"a":falsey}"#,
                      #"{"a":"\n"}"#, #"{"a":"\u0041"}"#,
                      #"{"a":"1","a":"2"}"#, #"{"a":"1",}"#, #"["a",]"#, #"{"a" "b"}"#, #"{"a":"b""#, #"{"a":"b"} x"#,
                      "{\"a\":\"tab\there\"}", "", "   ", "42", "nul", #"{a:"b"}"#, #"{"a":'b'}"#, "[[[[[[[[[[]]]]]]]]]]",
                      #"{"a":-1}"#, #"{"a":1.5e3}"#, "\"unterminated"]
        for text in others {
            #expect(PlainJSON.value(Array(text.utf8)) == nil, "\(text)")
        }
    }

    /// Random bodies from pieces of JSON and of not-quite-JSON: where `PlainJSON`
    /// reads one, `JSONSerialization` reads the same; a body built from plain
    /// pieces only is always read.
    @Test func randomBodiesAgreeWithJSONSerialization() throws {
        var rng = SystemRandomNumberGenerator()
        let words = ["a", "topics", "user.1", "é", "漢字", "", " ", "x y", "🚀", "device_id"]
        func plainValue(_ depth: Int) -> String {
            switch depth > 3 ? Int.random(in: 3..<5, using: &rng) % 4 : Int.random(in: 0..<4, using: &rng) {
            case 0: return "\"" + words.randomElement(using: &rng)! + "\""
            case 3: return ["true", "false", "null"].randomElement(using: &rng)!
            case 1:
                let n = Int.random(in: 0...4, using: &rng)
                return "[" + (0..<n).map { _ in plainValue(depth + 1) }.joined(separator: ",") + "]"
            default:
                var keys = Set<String>()
                for _ in 0..<Int.random(in: 0...4, using: &rng) { keys.insert(words.randomElement(using: &rng)!) }
                return "{" + keys.map { "\"\($0)\":" + plainValue(depth + 1) }.joined(separator: ", ") + "}"
            }
        }
        let faults = ["1", "true", "null", "\"\\n\"", ",", "}", "]", "\"a\":", "\"dup\":\"1\",\"dup\":\"2\"", "-0", "\"\t\""]
        var read = 0
        for _ in 0..<3_000 {
            var text = plainValue(0)
            if Bool.random(using: &rng) {
                let i = text.index(text.startIndex, offsetBy: Int.random(in: 0...text.count, using: &rng))
                text.insert(contentsOf: faults.randomElement(using: &rng)!, at: i)
            } else {
                let mine = PlainJSON.value(Array(text.utf8))
                #expect(mine != nil, "a plain body not read: \(text)")
            }
            guard let mine = PlainJSON.value(Array(text.utf8)) else { continue }
            read += 1
            let theirs = try #require(Self.serialized(text), "read by PlainJSON, refused by JSONSerialization: \(text)")
            #expect(Self.canonical(mine) == Self.canonical(theirs), "\(text)")
        }
        #expect(read > 1_500)
    }
}
