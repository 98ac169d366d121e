import Foundation
import EventJSON
@testable import MPushAPI
import Projections
import Testing

/// A posted list's plainest body read in one pass (`PostedTopicList`) gives the
/// list the body read as an object gives, or nothing; every plain body is read so.
@Suite struct PostedTopicListTests {
    static let pieces = ["user.1", "news", "é", "日本", "🙂", "\"", "\\", "\n", "\t", "\u{01}", "\u{7F}", " ", ",", "[", "]", "{", "}", ":"]

    struct BodyMaker {
        var random: SeededRandom
        var plain = false

        mutating func space() -> String {
            random.int(3) > 0 ? "" : random.pick(plain ? [" ", "\t", "\n", "\r\n", "  "] : [" ", "\t", "\n", "\r\n", "\u{A0}", "\u{0B}"])
        }

        mutating func code() -> String {
            if plain || random.int(4) > 0 { return "user.\(random.int(1_000_000))" }
            return (0..<(1 + random.int(3))).map { _ in random.pick(PostedTopicListTests.pieces) }.joined()
        }

        mutating func item() -> String {
            if plain || random.int(10) > 0 { return JSONText.quoted(code()) }
            return random.pick(["7", "null", "true", #"{"code":"news"}"#, "[]", #""a\u0062""#, #""x\/y""#])
        }

        mutating func body() -> String {
            let n = random.int(plain ? 8 : 6)
            var array = "[" + space() + (0..<n).map { _ in space() + item() + space() }.joined(separator: ",") + space() + "]"
            var pairs = [space() + #""topics""# + space() + ":" + space() + array + space()]
            if !plain {
                switch random.int(12) {
                case 0: array = "[" + array.dropFirst().dropLast() + ",]"; pairs[0] = #""topics":"# + array
                case 1: pairs.append(#""limit":5"#)
                case 2: pairs.append(#""expr":"news""#)
                case 3: pairs.append(pairs[0])
                case 4: pairs[0] = #""Topics":"# + array
                case 5: pairs[0] = #""topics":"a,b""#
                default: break
                }
                pairs.shuffle(using: &random)
            }
            var body = space() + "{" + pairs.joined(separator: ",") + "}" + space()
            if !plain, random.int(20) == 0 { body += random.pick(["x", ",", "}", "{}"]) }
            if !plain, random.int(20) == 0 { body = String(body.dropLast(1 + random.int(3))) }
            return body
        }
    }

    @Test func readsWhatTheBodyReadAsAnObjectGivesOrNothing() throws {
        var maker = BodyMaker(random: SeededRandom(seed: 37))
        var scanned = 0, plainBodies = 0
        for n in 0..<20_000 {
            maker.plain = n % 3 == 0
            let body = maker.body()
            let fast = Array(body.utf8).withUnsafeBufferPointer { PostedTopicList.codes($0) }
            // What the endpoint reads from the object: the list of plain codes, and nothing else.
            let object = (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any]
            if let fast {
                scanned += 1
                let object = try #require(object, "read a body that is not a JSON object: \(body)")
                #expect(object.count == 1, "\(body)")
                #expect((object["topics"] as? [String]).map { TopicCodeList($0) } == fast, "\(body): \(fast)")
            }
            if maker.plain {
                plainBodies += 1
                #expect(fast != nil, "a plain body not read: \(body)")
            }
        }
        #expect(scanned > plainBodies && plainBodies > 6_000, "\(scanned), \(plainBodies)")
    }

    @Test func leavesOtherBodiesToTheObjectReading() {
        func codes(_ body: String) -> [String]? { Array(body.utf8).withUnsafeBufferPointer { PostedTopicList.codes($0) }?.strings }
        #expect(codes(#"{"topics":["user.1","user.2"]}"#) == ["user.1", "user.2"])
        #expect(codes(" {\"topics\" : [ ] } \n") == [])
        #expect(codes(#"{"topics":[" padded ","é"]}"#) == [" padded ", "é"])  // checked as codes later, as read
        for other in [#"{"topics":["a\u0062"]}"#, #"{"topics":["a"],"limit":1}"#, #"{"topics":[{"code":"a"}]}"#,
                      #"{"topics":["a",]}"#, #"{"topics":["a"]} x"#, #"{"topics":"a,b"}"#, #"["a"]"#, "",
                      #"{"topics":["a"]"#, "{\"topics\":[\"a\tb\"]}", "{}", " { } ", #"{"topics":["a"],"topics":["b"]}"#] {
            #expect(codes(other) == nil, "\(other)")
        }
    }
}
