@testable import EventJSON
import Foundation
import SubscriptionLog
import Testing

/// `load`'s one-pass reading of command lines gives what the general reading
/// (a JSON object tree) gives, or nothing; and it is the path plain lines take.
@Suite struct CommandLineScannerTests {
    static let pieces = ["a", "news", "D1", "é", "日本", "🙂", "\"", "\\", "\n", "\t", "\u{01}", "\u{7F}", "\u{2028}",
                         " ", "  ", "x.y_z-1", "/", "{", "]", ",", ":"]

    /// One randomly made command line: its key/value pairs in random order, some of them
    /// missing, repeated, unknown or of another JSON type, with random white space.
    struct LineMaker {
        var random: SeededRandom
        /// Only what the scanner reads: no escapes, no odd values, nothing missing or extra.
        var plain = false

        mutating func text() -> String {
            if plain || random.int(3) > 0 { return "s\(random.int(100_000))" + (random.int(8) == 0 ? "é" : "") }
            return (0..<(1 + random.int(4))).map { _ in random.pick(CommandLineScannerTests.pieces) }.joined()
        }

        mutating func space() -> String { plain || random.int(4) > 0 ? "" : random.pick([" ", "\t", "  ", "\r\n", "\u{A0}"]) }

        mutating func string(_ s: String) -> String { JSONText.quoted(s) }

        mutating func odd(_ usual: String) -> String {
            guard !plain, random.int(12) == 0 else { return usual }
            return random.pick(["null", "1", "1.5", "true", "[]", "{}", "\"\"", "-0", "1e3", "01"])
        }

        mutating func integer(_ usual: Int64) -> String {
            guard !plain, random.int(6) == 0 else { return "\(usual)" }
            return random.pick(["\(usual).0", "\"\(usual)\"", "\(usual)e0", "-\(usual)", "0", "12345678901234567",
                                "true", "null", "0\(usual)"])
        }

        mutating func topic() -> String {
            if random.int(3) == 0 { return odd(string(text())) }
            var pairs = ["\"code\":" + odd(string(text()))]
            if random.int(2) == 0 {
                let title = random.pick(["News", "  padded  ", "", "   ", "Néws", "\u{200B}x"])
                pairs.append("\"title\":" + odd(random.int(5) == 0 ? "null" : string(plain ? title : text() + title)))
            }
            if random.int(2) == 0 {
                pairs.append("\"single\":" + (plain ? random.pick(["true", "false", "null"])
                                                    : random.pick(["true", "false", "null", "1", "0", "\"true\"", "2"])))
            }
            if !plain, random.int(15) == 0 { pairs.append("\"extra\":1") }
            if !plain, random.int(15) == 0 { pairs.append(pairs[0]) }
            pairs.shuffle(using: &random)
            return "{" + pairs.map { space() + $0 + space() }.joined(separator: ",") + "}"
        }

        mutating func line() -> (line: String, defaultProject: String?) {
            let types = ["token", "register", "unregister", "unregister-all", "token-rejected",
                         "forget-device", "drop-topic", "expire-token"]
            let type = plain || random.int(20) > 0 ? random.pick(types) : random.pick(["bogus", "", "Token"])
            var pairs: [(String, String)] = [("type", string(type))]
            let defaultProject: String? = random.int(3) == 0 ? "fallback" : nil
            if defaultProject == nil || random.int(2) == 0 { pairs.append(("project", odd(string(random.pick(["demo", "p2", text()]))))) }
            let device = random.int(4) == 0 ? "0b0f3a52-7d4e-4c1a-9f57-2f1e6f3b8c11" : text()
            let token = random.pick([String(repeating: "ab", count: 32), "fcm:" + String(repeating: "x", count: 150), text()])
            switch type {
            case "token":
                pairs += [("device_id", odd(string(device))), ("token", odd(string(token))),
                          ("platform", odd(string(random.pick(plain ? ["ios", "android", "IOS", "and"] : ["ios", "android", "IOS", "and", "windows"]))))]
            case "register", "unregister":
                let n = random.int(plain ? 4 : 5)
                pairs += [("device_id", odd(string(device))),
                          ("topics", odd("[" + (0..<n).map { _ in space() + topic() + space() }.joined(separator: ",") + "]"))]
            case "token-rejected":
                pairs += [("token", odd(string(token))), ("at", integer(1_764_100_000_000 + Int64(random.int(1 << 30))))]
                if random.int(2) == 0 { pairs.append(("reason", odd(string(random.pick(["Unregistered", "BadDeviceToken", text()]))))) }
            case "drop-topic": pairs.append(("code", odd(string(text()))))
            case "expire-token": pairs.append(("token", odd(string(token))))
            default: pairs.append(("device_id", odd(string(device))))
            }
            if random.int(3) == 0 { pairs.append(("seq", integer(Int64(1 + random.int(1 << 40))))) }
            if random.int(3) == 0 {
                let ts = plain || random.int(5) > 0 ? 1_764_000_000_000 + Int64(random.int(1 << 30)) : Int64(random.int(2_000_000_000))
                pairs.append(("ts", integer(ts)))
            }
            if !plain {
                if random.int(10) == 0, !pairs.isEmpty { pairs.remove(at: random.int(pairs.count)) }
                if random.int(15) == 0 { pairs.append(pairs[random.int(pairs.count)]) }
                if random.int(15) == 0 { pairs.append(("extra", "\"x\"")) }
            }
            return (object(pairs), defaultProject)
        }

        /// One randomly made body of a membership request (`/api/tokens`, `/api/register`, …) for
        /// `type`: its route's keys, and, unless plain, keys another route reads, keys a request does
        /// not give (`project`, `type`, `seq`, …), odd values, missing and repeated keys.
        mutating func requestBody(_ type: String) -> String {
            let device = random.int(4) == 0 ? "0b0f3a52-7d4e-4c1a-9f57-2f1e6f3b8c11" : text()
            let token = random.pick([String(repeating: "ab", count: 32), "fcm:" + String(repeating: "x", count: 150), text()])
            var pairs: [(String, String)] = [("device_id", odd(string(device)))]
            switch type {
            case "token":
                pairs += [("token", odd(string(token))), ("platform", odd(string(random.pick(["ios", "android", "and", "windows"]))))]
            case "register", "unregister":
                let n = random.int(plain ? 4 : 5)
                pairs.append(("topics", odd("[" + (0..<n).map { _ in space() + topic() + space() }.joined(separator: ",") + "]")))
            default:
                break
            }
            if !plain {
                if random.int(6) == 0 {
                    pairs.append(random.pick([("project", string("other")), ("type", string("token")), ("seq", "5"), ("ts", "1764100807728"),
                                              ("at", "1764100807728"), ("reason", string("x")), ("code", string("c")), ("extra", "1")]))
                }
                if random.int(8) == 0 { pairs.append(random.pick([("token", odd(string(token))), ("platform", odd(string("ios"))), ("topics", "[]")])) }
                if random.int(10) == 0 { pairs.remove(at: random.int(pairs.count)) }
                if random.int(15) == 0, !pairs.isEmpty { pairs.append(pairs[random.int(pairs.count)]) }
            }
            return object(pairs)
        }

        /// `pairs` as a JSON object, shuffled, with random white space and, now and then, something after it.
        mutating func object(_ pairs: [(String, String)]) -> String {
            var pairs = pairs
            pairs.shuffle(using: &random)
            var line = space() + "{" + pairs.map { space() + string($0.0) + space() + ":" + space() + $0.1 + space() }.joined(separator: ",") + "}" + space()
            if !plain, random.int(25) == 0 { line += random.pick(["x", ",", "}", "{}"]) }
            return line
        }
    }

    @Test func theScannerReadsWhatTheGeneralReadingReadsOrNothing() throws {
        var maker = LineMaker(random: SeededRandom(seed: 29))
        var scanned = 0, general = 0, plainScanned = 0, plainGeneral = 0
        for n in 0..<30_000 {
            maker.plain = n % 3 == 0
            let (line, defaultProject) = maker.line()
            let fast = CommandLineScanner.scan(line, defaultProject: defaultProject)
            let slow = try? EventJSON.generalExportedEvent(fromLine: line, defaultProject: defaultProject)
            if let fast {
                scanned += 1
                if maker.plain { plainScanned += 1 }
                let slow = try #require(slow, "the scanner took a line the general reading refuses: \(line)")
                #expect(fast.event == slow.event && fast.timestamp == slow.timestamp && fast.sequence == slow.sequence,
                        "\(line): \(fast) against \(slow)")
            }
            if slow != nil {
                general += 1
                if maker.plain { plainGeneral += 1 }
            }
            // Whichever reads it, the public entry gives the general result.
            let entry = try? EventJSON.exportedEvent(fromLine: line, defaultProject: defaultProject)
            #expect(entry?.event == slow?.event && entry?.timestamp == slow?.timestamp && entry?.sequence == slow?.sequence, "\(line)")
        }
        // Every plain line the general reading takes, the scanner takes; and many of the others.
        #expect(plainScanned == plainGeneral && plainGeneral > 7_000, "\(plainScanned) of \(plainGeneral)")
        #expect(scanned > general / 2, "scanned \(scanned), general \(general)")
    }

    /// A membership request's body (the HTTP edge's register and the like) read in one pass
    /// gives the command the general reading gives — the body's object with the key's project
    /// and the route's type set, as the edge reads it — or nothing; every plain body is read so.
    @Test func requestBodiesReadAsTheGeneralReadingReadsThem() throws {
        var maker = LineMaker(random: SeededRandom(seed: 31))
        var scanned = 0, general = 0, plainScanned = 0, plainGeneral = 0
        for n in 0..<30_000 {
            maker.plain = n % 3 == 0
            let type = maker.random.pick(["token", "register", "unregister", "unregister-all"])
            let body = maker.requestBody(type)
            let fast = Array(body.utf8).withUnsafeBufferPointer { CommandLineScanner.scanRequest($0, project: "demo", type: type) }
            var slow: Event?
            if var object = (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] {
                object["project"] = "demo"
                object["type"] = type
                slow = try? EventJSON.event(from: object)
            }
            if let fast {
                scanned += 1
                if maker.plain { plainScanned += 1 }
                let slow = try #require(slow, "the scanner took a body the general reading refuses: \(body)")
                #expect(fast == slow, "\(body): \(fast) against \(slow)")
            }
            if slow != nil {
                general += 1
                if maker.plain { plainGeneral += 1 }
            }
        }
        #expect(plainScanned == plainGeneral && plainGeneral > 7_000, "\(plainScanned) of \(plainGeneral)")
        #expect(scanned > general / 2, "scanned \(scanned), general \(general)")
    }

    @Test func requestBodiesItLeavesToTheGeneralReading() throws {
        func scan(_ body: String, _ type: String = "register") -> Event? {
            Array(body.utf8).withUnsafeBufferPointer { CommandLineScanner.scanRequest($0, project: "demo", type: type) }
        }
        let base = #"{"device_id":"D1","topics":["news",{"code":"user.1","title":"U","single":true}]}"#
        #expect(scan(base) == Event(project: "demo", body: .register(deviceID: "D1", topics: [
            TopicSpec(code: "news"), TopicSpec(code: "user.1", title: "U", single: true)])))
        #expect(scan(#"{"device_id":"D1","token":"ab","platform":"and"}"#, "token")
                == Event(project: "demo", body: .token(deviceID: "D1", token: "ab", platform: .android)))
        for other in [
            #"{"project":"other","device_id":"D1","topics":["news"]}"#,  // the key decides the project
            #"{"type":"unregister","device_id":"D1","topics":["news"]}"#,  // the route decides the type
            #"{"device_id":"D1","topics":["news"],"seq":5}"#,
            #"{"device_id":"D\u0031","topics":["news"]}"#,
            #"{"device_id":"D1","topics":"[\"news\"]"}"#,
            #"{"device_id":"D1","topics":[]}"#,
            #"{"device_id":"   ","topics":["news"]}"#,
            #"{"topics":["news"]}"#,
        ] {
            #expect(scan(other) == nil, "\(other)")
        }
    }

    @Test func formsItLeavesToTheGeneralReading() throws {
        let base = #"{"project":"demo","type":"register","device_id":"D1","topics":["news",{"code":"user.1","title":"U","single":true}]}"#
        #expect(CommandLineScanner.scan(base, defaultProject: nil) != nil)
        for other in [
            #"{"project":"demo","type":"register","device_id":"D\u0031","topics":["news"]}"#,
            #"{"project":"demo","type":"register","device_id":"D1","topics":"[\"news\"]"}"#,
            #"{"project":"demo","type":"register","device_id":"D1","device_id":"D2","topics":["news"]}"#,
            #"{"project":"demo","type":"register","device_id":"D1","topics":[{"code":"n","single":1}]}"#,
            #"{"project":"demo","type":"register","device_id":"D1","topics":["news"],"x":1}"#,
            #"{"project":null,"type":"unregister-all","device_id":"D1"}"#,
            #"{"project":"demo","type":"token-rejected","token":"t","at":1764100807728.0}"#,
            #"{"project":"demo","type":"token-rejected","token":"t","at":"1764100807728"}"#,
            #"{"project":"demo","type":"unregister-all","device_id":"D1","ts":1764100807}"#,
            #"{"project":"demo","type":"unregister-all","device_id":"D1"} x"#,
            #"{"project":"demo","type":"token","device_id":"D1","token":"t","platform":"windows"}"#,
            #"{"project":"demo","type":"unregister-all","device_id":"   "}"#,
        ] {
            #expect(CommandLineScanner.scan(other, defaultProject: nil) == nil, "\(other)")
        }
    }
}
