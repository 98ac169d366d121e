import EventJSON
import SubscriptionLog
import Testing

/// An export's line is written as bytes (`EventJSON.appendLine`); archives
/// written before compare their lines with it, so it must be byte for byte the
/// line the String-appending version wrote, kept here as the reference.
@Suite struct EventJSONLineTests {
    /// The line as `EventJSON.line` wrote it up to the thirty-sixth session.
    static func reference(_ record: LogRecord, link: ChainHash? = nil, unchained: Bool = false) -> String {
        var out = "{\"seq\":"
        out += String(record.sequence)
        out += ",\"ts\":"
        out += String(record.timestamp)
        out += ",\"project\":"
        out += JSONText.quoted(record.event.project)
        out += ",\"type\":"
        out += JSONText.quoted(record.event.body.typeName)
        func field(_ name: String, _ value: String) { out += ",\"" + name + "\":" + JSONText.quoted(value) }
        switch record.event.body {
        case .token(let d, let t, let p):
            field("device_id", d)
            field("token", t)
            out += ",\"platform\":\"\(p)\""
        case .register(let d, let topics):
            field("device_id", d)
            out += ",\"topics\":["
            for (i, t) in topics.enumerated() {
                if i > 0 { out += "," }
                out += "{\"code\":" + JSONText.quoted(t.code)
                if let title = t.title { out += ",\"title\":" + JSONText.quoted(title) }
                if let single = t.single { out += single ? ",\"single\":true" : ",\"single\":false" }
                out += "}"
            }
            out += "]"
        case .unregister(let d, let codes):
            field("device_id", d)
            out += ",\"topics\":[" + codes.map { JSONText.quoted($0) }.joined(separator: ",") + "]"
        case .unregisterAll(let d), .forgetDevice(let d):
            field("device_id", d)
        case .tokenRejected(let t, let at, let reason):
            field("token", t)
            out += ",\"at\":" + String(at)
            field("reason", reason)
        case .dropTopic(let code):
            field("code", code)
        case .expireToken(let t):
            field("token", t)
        }
        if let link { out += ",\"link\":\"" + link.hex + "\"" }
        if unchained { out += ",\"unchained\":true" }
        return out + "}"
    }

    /// Strings a JSON writer can get wrong: quotes, backslashes, controls, DEL,
    /// U+2028/U+2029 (left raw in an export's line), other 0xE2 punctuation,
    /// accents, emoji, empty.
    static let awkward = ["", "plain", "a\"b", "back\\slash", "tab\there", "line\nbreak", "cr\r", "\u{1}\u{1f}", "del\u{7f}",
                          "sep\u{2028}par\u{2029}", "dash\u{2014}", "caf\u{e9}", "\u{1F600}", "\u{0}nul"]

    @Test func theLineIsByteForByteTheOneTheStringVersionWrote() throws {
        var random = ReplayRandom(seed: 61)
        var records = LogRecordVersionTests.randomRecords(400, seed: 29)
        func pick() -> String { random.pick(Self.awkward) + (random.int(2) == 0 ? "" : random.pick(Self.awkward)) }
        for i in 0..<400 {
            let body: EventBody
            switch i % 5 {
            case 0: body = .register(deviceID: pick(), topics: (0..<random.int(4)).map { _ in
                TopicSpec(code: pick(), title: random.int(2) == 0 ? nil : pick(), single: random.int(3) == 0 ? nil : random.int(2) == 0) })
            case 1: body = .unregister(deviceID: pick(), codes: (0..<random.int(4)).map { _ in pick() })
            case 2: body = .tokenRejected(token: pick(), rejectedAt: Int64(random.int(1 << 20)) - (1 << 19), reason: pick())
            case 3: body = .token(deviceID: pick(), token: pick(), platform: random.int(2) == 0 ? .ios : .android)
            default: body = .dropTopic(code: pick())
            }
            // Times before 1970 and sequences past 2^63 as well.
            records.append(LogRecord(sequence: i % 7 == 0 ? UInt64.max - UInt64(i) : UInt64(i),
                                     timestamp: i % 3 == 0 ? -Int64(i) * 1_000_003 : Int64(i) * 1_764_100_000,
                                     event: Event(project: pick(), body: body)))
        }
        var link = ChainHash.genesis
        for (i, record) in records.enumerated() {
            _ = try RecordCodec.encode(record, chainingFrom: &link)
            let withLink: ChainHash? = i % 4 == 0 ? link : nil, unchained = i % 9 == 0
            let line = EventJSON.line(record, link: withLink, unchained: unchained)
            #expect(Array(line.utf8) == Array(Self.reference(record, link: withLink, unchained: unchained).utf8), "record \(i)")
            var appended: [UInt8] = [0x41]
            EventJSON.appendLine(record, link: withLink, unchained: unchained, to: &appended)
            #expect(appended == [0x41] + Array(line.utf8), "record \(i)")
        }
        #expect(records.count == 800)
    }

    @Test(arguments: [Int64.min, Int64.min + 1, -1_000_000_007, -10, -9, -1, 0, 1, 9, 10, 99, 100, 1_764_100_807_728, Int64.max])
    func decimalsAreSpelledAsStringSpellsThem(v: Int64) {
        var out: [UInt8] = []
        JSONText.appendDecimal(v, to: &out)
        #expect(out == Array(String(v).utf8))
        if v >= 0 {
            out = []
            JSONText.appendDecimal(UInt64(v) &* 2 &+ 1, to: &out)
            #expect(out == Array(String(UInt64(v) &* 2 &+ 1).utf8))
        }
    }
}
