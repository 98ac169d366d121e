import Foundation
import EventJSON
import SubscriptionLog
import Testing

@Suite struct ValidationTests {
    func errors(_ body: EventBody, project: String = "demo") -> [ValidationError] {
        do {
            try Validation.validate(Event(project: project, body: body))
            return []
        } catch {
            return error.errors
        }
    }

    func fields(_ body: EventBody, project: String = "demo") -> [String] { errors(body, project: project).map(\.field) }

    @Test func validCommandsPass() {
        #expect(fields(.token(deviceID: "D1", token: String(repeating: "a", count: 64), platform: .ios)).isEmpty)
        #expect(fields(.register(deviceID: "D1", topics: [TopicSpec(code: "user.12"), TopicSpec(code: "a-b_c~d@e/f+g=h#1")])).isEmpty)
        #expect(fields(.tokenRejected(token: "t", rejectedAt: 1_764_100_807_728, reason: "Unregistered")).isEmpty)
    }

    @Test func projectNames() {
        #expect(fields(.unregisterAll(deviceID: "D"), project: "") == ["project"])
        #expect(fields(.unregisterAll(deviceID: "D"), project: "Demo") == ["project"])
        #expect(fields(.unregisterAll(deviceID: "D"), project: String(repeating: "p", count: 65)) == ["project"])
        #expect(fields(.unregisterAll(deviceID: "D"), project: "my-app_2.prod").isEmpty)
        // Every byte: lowercase ASCII letters, digits, '_', '-' and '.'; nothing else.
        for byte in UInt8(0x00)...UInt8(0xFF) {
            let allowed = (0x61...0x7A).contains(byte) || (0x30...0x39).contains(byte) || [0x5F, 0x2D, 0x2E].contains(byte)
            let name = String(decoding: [0x70, byte], as: UTF8.self)
            #expect(fields(.unregisterAll(deviceID: "D"), project: name).isEmpty == allowed, "byte \(byte)")
        }
    }

    @Test func deviceIDs() {
        #expect(fields(.unregisterAll(deviceID: "")) == ["device_id"])
        #expect(fields(.unregisterAll(deviceID: String(repeating: "d", count: 257))) == ["device_id"])
        #expect(fields(.unregisterAll(deviceID: String(repeating: "d", count: 256))).isEmpty)
        #expect(fields(.unregisterAll(deviceID: "bad\nid")) == ["device_id"])
        #expect(fields(.unregisterAll(deviceID: "bad\u{7F}id")) == ["device_id"])
        #expect(fields(.unregisterAll(deviceID: "bäd\u{85}id")) == ["device_id"], "a C1 control character")
        #expect(fields(.unregisterAll(deviceID: "bäd-id")).isEmpty)
    }

    @Test func tokens() {
        #expect(fields(.token(deviceID: "D", token: "", platform: .ios)) == ["token"])
        #expect(fields(.token(deviceID: "D", token: "has space", platform: .ios)) == ["token"])
        #expect(fields(.token(deviceID: "D", token: "tök", platform: .ios)) == ["token"])
        #expect(fields(.token(deviceID: "D", token: "t\u{7F}", platform: .ios)) == ["token"])
        #expect(fields(.token(deviceID: "D", token: "~!t", platform: .ios)).isEmpty)
        #expect(fields(.token(deviceID: "D", token: String(repeating: "t", count: 501), platform: .ios)) == ["token"])
        #expect(fields(.token(deviceID: "D", token: String(repeating: "t", count: 500), platform: .android)).isEmpty)
    }

    @Test func topicCodesTitlesAndCounts() {
        #expect(fields(.register(deviceID: "D", topics: [])) == ["topics"])
        #expect(fields(.register(deviceID: "D", topics: (0..<101).map { TopicSpec(code: "t\($0)") })) == ["topics"])
        #expect(fields(.register(deviceID: "D", topics: (0..<100).map { TopicSpec(code: "t\($0)") })).isEmpty)
        #expect(fields(.register(deviceID: "D", topics: [TopicSpec(code: "ok"), TopicSpec(code: "has space")])) == ["topics.1.code"])
        #expect(fields(.register(deviceID: "D", topics: [TopicSpec(code: "a:b")])) == ["topics.0.code"])
        #expect(fields(.register(deviceID: "D", topics: [TopicSpec(code: String(repeating: "c", count: 129))])) == ["topics.0.code"])
        #expect(fields(.register(deviceID: "D", topics: [TopicSpec(code: "c", title: String(repeating: "é", count: 257))])) == ["topics.0.title"])
        #expect(fields(.register(deviceID: "D", topics: [TopicSpec(code: "c", title: String(repeating: "é", count: 256))])).isEmpty)
        #expect(fields(.unregister(deviceID: "D", codes: ["(x)"])) == ["topics.0.code"])
    }

    /// Titles and reasons are counted in code points, as MPush counts them (Laravel `max:256`,
    /// `mb_strlen`), not in characters: one character may carry any number of combining marks,
    /// and a 1-character title of 65,537 bytes was more than the log record holds.
    @Test func titlesAndReasonsAreCountedInCodePoints() {
        func title(_ s: String) -> [String] { fields(.register(deviceID: "D", topics: [TopicSpec(code: "c", title: s)])) }
        func reason(_ s: String) -> [String] { fields(.tokenRejected(token: "t", rejectedAt: 1_764_100_807_728, reason: s)) }
        let accented = { (marks: Int) in "e" + String(repeating: "\u{301}", count: marks) }
        #expect(title(accented(255)).isEmpty && reason(accented(255)).isEmpty)
        #expect(title(accented(256)) == ["topics.0.title"] && reason(accented(256)) == ["reason"])
        #expect(title(accented(32_768)) == ["topics.0.title"] && reason(accented(32_768)) == ["reason"])
        // 256 code points of four bytes each still count 256.
        #expect(title(String(repeating: "🙂", count: 256)).isEmpty && title(String(repeating: "🙂", count: 257)) == ["topics.0.title"])
        // A flag is one character of two code points.
        #expect(title(String(repeating: "🇮🇹", count: 128)).isEmpty && title(String(repeating: "🇮🇹", count: 129)) == ["topics.0.title"])
    }

    /// A device id of nothing but whitespace (Unicode's, and the zero-width characters Laravel's
    /// TrimStrings takes away) is no device id; one with content is kept exactly as it is.
    @Test func aBlankDeviceIDIsRequired() {
        for id in [" ", "   ", "\u{200B}", "\u{FEFF}", " \u{3000}\u{A0}\u{200E} "] {
            for body in [EventBody.unregisterAll(deviceID: id), .token(deviceID: id, token: "t", platform: .ios),
                         .register(deviceID: id, topics: [TopicSpec(code: "a")]), .unregister(deviceID: id, codes: ["a"])] {
                #expect(errors(body).map(\.description) == ["device_id: The device id field is required."], "\(body)")
            }
        }
        #expect(fields(.unregisterAll(deviceID: " D1 ")).isEmpty)
        #expect(fields(.unregisterAll(deviceID: "\u{200B}D")).isEmpty)
        // The garbage collector forgets a device an earlier version let in with such an id.
        #expect(fields(.forgetDevice(deviceID: "   ")).isEmpty)
    }

    /// A record some log already holds (`import`) is checked against what the log can hold, not
    /// against today's command rules: earlier versions counted titles in characters and took
    /// blank device ids, and an import that refused or changed them would not be the same log.
    @Test func loggedRecordsAreCheckedAgainstWhatTheLogHolds() {
        func logged(_ body: EventBody) -> [String] {
            do { try Validation.validate(Event(project: "demo", body: body), rules: .logged); return [] } catch { return error.errors.map(\.field) }
        }
        let long = "e" + String(repeating: "\u{301}", count: 299)
        #expect(logged(.register(deviceID: "   ", topics: [TopicSpec(code: "a", title: long), TopicSpec(code: "b", title: "")])).isEmpty)
        #expect(logged(.tokenRejected(token: "t", rejectedAt: 1_764_100_807_728, reason: long)).isEmpty)
        // What no record can hold is refused all the same: a field over 65,535 bytes.
        let huge = "e" + String(repeating: "\u{301}", count: 32_768)
        #expect(logged(.register(deviceID: "D", topics: [TopicSpec(code: "a", title: huge)])) == ["topics.0.title"])
        #expect(logged(.tokenRejected(token: "t", rejectedAt: 1_764_100_807_728, reason: huge)) == ["reason"])
        #expect(logged(.unregisterAll(deviceID: "")) == ["device_id"])
    }

    /// Topic codes are ASCII: letters A–Z a–z, digits 0–9 and `. _ - ~ @ / + = #`; the README says exactly that.
    @Test func topicCodesAreASCIIAsTheREADMEStates() throws {
        let punctuation = "._-~@/+=#"
        for byte in UInt8(0x21)...UInt8(0x7E) {
            let c = Character(Unicode.Scalar(byte))
            let allowed = c.isASCII && (c.isLetter || c.isNumber) || punctuation.contains(c)
            #expect(Validation.isValidTopicCode("t\(c)") == allowed, "\(c)")
        }
        for code in ["café", "naïve", "Straße", "日本", "ｆｕｌｌ", "٣", "ǅ", "a b", "tab\t"] {
            #expect(!Validation.isValidTopicCode(code), "\(code)")
            #expect(errors(.register(deviceID: "D", topics: [TopicSpec(code: code)])).map(\.message)
                    == ["The topic code may contain only ASCII letters (A-Z, a-z), digits (0-9) and . _ - ~ @ / + = #."])
        }
        #expect(Validation.isValidTopicCode("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789" + punctuation))
        // 128 bytes is 128 characters: every allowed character is one byte.
        #expect(Validation.isValidTopicCode(String(repeating: "x", count: 128)) && !Validation.isValidTopicCode(String(repeating: "x", count: 129)))

        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let row = try #require(readme.split(separator: "\n").first { $0.hasPrefix("| topic code |") })
        #expect(row.contains("1–128 ASCII characters: letters `A-Z` `a-z`, digits `0-9` and `. _ - ~ @ / + = #`"), "\(row)")
        #expect(row.contains("no other characters (`café` is refused"), "\(row)")
        let api = try String(contentsOf: root.appendingPathComponent("docs/http-api.md"), encoding: .utf8)
        #expect(api.contains("topic codes 1–128 ASCII characters (`A-Z a-z 0-9 . _ - ~ @ / + = #`; no accented or non-Latin"))
    }

    @Test func rejectionTimes() {
        #expect(fields(.tokenRejected(token: "t", rejectedAt: 1_764_100_807, reason: "")) == ["at"])  // seconds, not ms
        #expect(fields(.tokenRejected(token: "t", rejectedAt: 1_764_100_807_728, reason: String(repeating: "r", count: 257))) == ["reason"])
    }

    @Test func errorsNameEveryBrokenField() {
        let e = errors(.register(deviceID: "", topics: [TopicSpec(code: "bad code")]), project: "X")
        #expect(Set(e.map(\.field)) == ["project", "device_id", "topics.0.code"])
        #expect(e.allSatisfy { !$0.message.isEmpty })
    }

    @Test func jsonCommandsDecodeLeniently() throws {
        let e = try EventJSON.event(fromLine: #"{"project":"demo","type":"register","device_id":"D","topics":"[{\"code\":\"a\",\"single\":\"true\"},\"b\"]"}"#)
        #expect(e.body == .register(deviceID: "D", topics: [TopicSpec(code: "a", single: true), TopicSpec(code: "b")]))
        let t = try EventJSON.event(fromLine: #"{"type":"token","device_id":"D","token":"x","platform":"and","os":"13"}"#, defaultProject: "demo")
        #expect(t.body == .token(deviceID: "D", token: "x", platform: .android))
        let single = try EventJSON.event(fromLine: #"{"project":"demo","type":"register","device_id":"D","topics":[{"code":"u","single":1}]}"#)
        #expect(single.body == .register(deviceID: "D", topics: [TopicSpec(code: "u", single: true)]))
        #expect(throws: InvalidCommand.self) { try EventJSON.event(fromLine: #"{"project":"demo","type":"token","device_id":"D","token":"x","platform":"web"}"#) }
        #expect(throws: InvalidCommand.self) { try EventJSON.event(fromLine: #"{"project":"demo","type":"register","device_id":"D","topics":[{"code":"u","single":2}]}"#) }
        // 0.5 was read as 0 (false); every number but 0 and 1 is refused.
        for bad in ["0.5", "1.5", "-0.5", "1e-300", "-1"] {
            #expect(throws: InvalidCommand.self, "\(bad)") {
                try EventJSON.event(fromLine: #"{"project":"demo","type":"register","device_id":"D","topics":[{"code":"u","single":\#(bad)}]}"#)
            }
        }
        for (text, value) in [("0", false), ("1", true), ("true", true), ("false", false), (#""1""#, true), (#""0""#, false),
                              (#""true""#, true), (#""FALSE""#, false)] {
            let e = try EventJSON.event(fromLine: #"{"project":"demo","type":"register","device_id":"D","topics":[{"code":"u","single":\#(text)}]}"#)
            #expect(e.body == .register(deviceID: "D", topics: [TopicSpec(code: "u", single: value)]), "\(text)")
        }
        #expect(throws: InvalidCommand.self) { try EventJSON.event(fromLine: "not json") }
    }

    /// An empty or blank title is no title (MPush trims strings and turns empty ones into null):
    /// a new topic is then titled with its code, an existing one keeps its title. A title with
    /// content is trimmed (a review found " Sport " kept with its spaces, which MPush would not).
    /// A record read from a log (`import`) keeps what it holds.
    @Test func aBlankTitleInACommandIsNoTitle() throws {
        func topics(_ titles: String, rules: Validation.Rules = .command) throws -> [TopicSpec] {
            let line = #"{"project":"demo","type":"register","device_id":"D","topics":[\#(titles)]}"#
            let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            guard case .register(_, let specs) = try EventJSON.event(from: object, rules: rules).body else { return [] }
            return specs
        }
        #expect(try topics(#"{"code":"a","title":""},{"code":"b","title":" \t\n "},{"code":"c","title":"\u200b\u3000"},{"code":"d","title":" D "},{"code":"e","title":"\u200bE\u3000e\u00a0"},{"code":"f","title":"F"}"#)
                == [TopicSpec(code: "a"), TopicSpec(code: "b"), TopicSpec(code: "c"), TopicSpec(code: "d", title: "D"),
                    TopicSpec(code: "e", title: "E\u{3000}e"), TopicSpec(code: "f", title: "F")])
        #expect(try topics(#"{"code":"a","title":""},{"code":"b","title":"  "},{"code":"c","title":" C "}"#, rules: .logged)
                == [TopicSpec(code: "a", title: ""), TopicSpec(code: "b", title: "  "), TopicSpec(code: "c", title: " C ")])
    }
}
