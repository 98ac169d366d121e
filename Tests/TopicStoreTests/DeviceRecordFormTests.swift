import Foundation
import LMDB
@testable import Projections
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// Device records since schema 4 hold a UUID device_id in 16 bytes and a hex
/// token in half its length (`StoredName`); a record of an older store, with
/// its names as text, still reads, matches and audits as the same record.
@Suite struct DeviceRecordFormTests {
    static let hexDigits = Array("0123456789abcdef")
    static let base64URL = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

    /// A random name of one of the shapes that are stored differently, or a near miss of one.
    static func randomName(_ rng: inout SeededRandom) -> String {
        func hex(_ n: Int) -> String { String((0..<n).map { _ in hexDigits[rng.int(16)] }) }
        func uuid() -> String { [hex(8), hex(4), hex(4), hex(4), hex(12)].joined(separator: "-") }
        func b64(_ n: Int) -> String { String((0..<n).map { _ in base64URL[rng.int(64)] }) }
        switch rng.int(20) {
        case 14: return b64(22) + ":APA91b" + b64(134)                  // an FCM token, 163 characters
        case 15: return "APA91b" + b64(rng.int(250))                    // no colon; past 255 it stays text
        case 16:                                                         // a colon anywhere, or two
            let n = 1 + rng.int(255), at = rng.int(n)
            var t = Array(b64(n)); t[at] = ":"
            if rng.int(4) == 0 { t[rng.int(n)] = ":" }
            return String(t)
        case 17: return b64(1 + rng.int(6))                             // short: text below 4 characters
        case 18: return b64(22) + ":" + b64(40) + [".", "=", "/", "+", "é"][rng.int(5)]  // one character outside
        case 19: return hex(31) + "g" + hex(32)                         // almost an APNs token
        case 0: return hex(64)
        case 1: return hex(64).uppercased()
        case 2: return hex(2 * (1 + rng.int(300)))                     // up to 600 digits: past 510 it stays text
        case 3: return hex(2 * (1 + rng.int(40))).uppercased()
        case 4: return String(repeating: "7", count: 2 * (1 + rng.int(20)))  // digits only
        case 5: return hex(1 + 2 * rng.int(40))                         // odd length
        case 6: return uuid()
        case 7: return uuid().uppercased()
        case 8:                                                          // mixed case
            let u = uuid()
            return u.prefix(9).uppercased() + u.dropFirst(9) + "a"
        case 9: return String(uuid().dropLast())                        // 35 characters
        case 10: return uuid().replacingOccurrences(of: "-", with: "_")
        case 11: return ""
        case 12: return "Gerät-\(rng.int(1000))-ü"
        default: return "dev-\(rng.int(100_000))"
        }
    }

    /// Every shape comes back byte for byte, in the expected number of bytes,
    /// and a name equals its own text and no other.
    @Test func namesRoundTrip() throws {
        var rng = SeededRandom(seed: 4)
        for _ in 0..<5_000 {
            let text = Self.randomName(&rng)
            let other = Self.randomName(&rng)
            let (form, size) = StoredName.plan(text)
            let utf8 = Array(text.utf8)
            switch form {
            case .text: #expect(size == 3 + utf8.count)
            case .lowerHex, .upperHex: #expect(size == 2 + utf8.count / 2 && utf8.count <= 510)
            case .lowerUUID, .upperUUID: #expect(size == 17 && utf8.count == 36)
            case .token64:
                let colons = utf8.filter { $0 == UInt8(ascii: ":") }.count
                #expect(utf8.count >= 4 && utf8.count <= 255 && colons <= 1)
                #expect(size == 3 + (6 * (utf8.count - colons) + 7) / 8)
            }
            // Each shape in its form: the 6-bit form exactly for base64url text of 4 to 255
            // characters with at most one colon that is not hex.
            let isB64 = utf8.allSatisfy { Self.base64URL.contains(Character(UnicodeScalar($0))) || $0 == UInt8(ascii: ":") }
                && utf8.filter { $0 == UInt8(ascii: ":") }.count <= 1 && (4...255).contains(utf8.count)
            if isB64, form != .lowerHex, form != .upperHex, form != .lowerUUID, form != .upperUUID {
                #expect(form == .token64, "\(text)")
            } else {
                #expect(form != .token64, "\(text)")
            }
            var buffer = [UInt8](repeating: 0xEE, count: size + 4)
            var at = 2
            buffer.withUnsafeMutableBytes { StoredName.write(text, form, at: $0.baseAddress!, &at) }
            #expect(at == 2 + size)
            try buffer.withUnsafeBytes { b in
                var readAt = 2
                let name = try #require(StoredName.read(b, &readAt))
                #expect(readAt == 2 + size)
                #expect(name.string == text, "\(text) as \(form)")
                #expect(name.textCount == utf8.count)
                utf8.withUnsafeBytes { #expect(name.equals(text: $0)) }
                Array(other.utf8).withUnsafeBytes { #expect(name.equals(text: $0) == (other == text)) }
                // The same text held as text (a record from before schema 4) is the same name.
                utf8.withUnsafeBytes { #expect(StoredName(text: $0).equals(name) && name.equals(StoredName(text: $0))) }
            }
        }
    }

    /// The form `plan` picks (classified 16 bytes a step in C) is the one the
    /// rule gives, checked here a byte at a time: bytes drawn next to every edge
    /// of the hex and base64url ranges, bytes from 0x80 up, at every length around
    /// the 16-byte steps and the 6-bit form's limit, and 36-byte texts with their
    /// dashes in place or one off.
    @Test func formsFollowTheShape() {
        func reference(_ t: [UInt8]) -> StoredName.Form {
            func hexCase(_ digits: [UInt8]) -> Bool? {
                var lower = false, upper = false
                for c in digits {
                    switch c {
                    case UInt8(ascii: "0")...UInt8(ascii: "9"): break
                    case UInt8(ascii: "a")...UInt8(ascii: "f"): lower = true
                    case UInt8(ascii: "A")...UInt8(ascii: "F"): upper = true
                    default: return nil
                    }
                }
                return lower && upper ? nil : upper
            }
            let dashes = [8, 13, 18, 23]
            if t.count == 36, dashes.allSatisfy({ t[$0] == UInt8(ascii: "-") }),
               let upper = hexCase(t.enumerated().filter { !dashes.contains($0.offset) }.map(\.element)) {
                return upper ? .upperUUID : .lowerUUID
            }
            if !t.isEmpty, t.count % 2 == 0, t.count <= 510, let upper = hexCase(t) { return upper ? .upperHex : .lowerHex }
            let b64 = Set(Self.base64URL.map { $0.asciiValue! })
            if (4...255).contains(t.count), t.allSatisfy({ b64.contains($0) || $0 == UInt8(ascii: ":") }),
               t.filter({ $0 == UInt8(ascii: ":") }).count <= 1 { return .token64 }
            return .text
        }
        let edges: [UInt8] = Array("/0189:@AEFG`aefg-_zZ[{,.+=".utf8) + [0x00, 0x7F, 0x80, 0xB0, 0xE1, 0xFF]
        let hex = Array("0123456789abcdefABCDEF".utf8)
        var rng = SeededRandom(seed: 11)
        var seen = Set<UInt8>()
        for round in 0..<20_000 {
            let count = round % 3 == 0 ? 36 : round % 7 == 0 ? 250 + rng.int(10) : rng.int(81)
            // Mostly hex digits of one case, so that a single odd byte decides.
            let upperRun = rng.int(2) == 0
            var t = (0..<count).map { _ -> UInt8 in
                let d = hex[rng.int(10 + 6)]
                return upperRun && d >= UInt8(ascii: "a") ? d - 32 : d
            }
            if count == 36 && rng.int(4) != 0 { for i in [8, 13, 18, 23] { t[i] = UInt8(ascii: "-") } }
            for _ in 0..<rng.int(3) where count > 0 { t[rng.int(count)] = rng.int(2) == 0 ? edges[rng.int(edges.count)] : hex[rng.int(hex.count)] }
            let form = t.withUnsafeBytes { StoredName.plan($0).form }
            #expect(form == reference(t), "\(t)")
            seen.insert(form.rawValue)
        }
        #expect(seen.count == 6)
    }

    /// A 6-bit name's packed bytes are what base64 decoding gives for its characters
    /// (the colon left out): checked against Foundation's decoder, every length a
    /// multiple of four from 4 to 252, with and without a colon.
    @Test func sixBitNamesPackAsBase64Decodes() throws {
        var rng = SeededRandom(seed: 12)
        for symbols in stride(from: 4, through: 252, by: 4) {
            for withColon in [false, true] {
                var chars = (0..<symbols).map { _ in Self.base64URL[rng.int(64)] }
                let standard = String(chars).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
                let expected = try #require(Data(base64Encoded: standard))
                if withColon { chars.insert(":", at: rng.int(symbols + 1)) }
                let text = String(chars)
                let (form, size) = StoredName.plan(text)
                #expect(form == .token64)
                var buffer = [UInt8](repeating: 0, count: size)
                var at = 0
                buffer.withUnsafeMutableBytes { StoredName.write(text, form, at: $0.baseAddress!, &at) }
                #expect(Array(buffer[3...]) == Array(expected), "\(text)")
            }
        }
    }

    /// Records of both formats decode to the same device; the new one is smaller for the SDKs' shapes.
    @Test func recordsOfBothFormatsDecode() throws {
        var rng = SeededRandom(seed: 7)
        for i in 0..<2_000 {
            let token: String? = i % 5 == 0 ? nil : Self.randomName(&rng)
            let record = DeviceRecord(deviceID: Self.randomName(&rng), token: token, platform: token == nil ? nil : (i % 2 == 0 ? .ios : .android),
                                      tokenTime: Int64(i) * 1_000_003, rejectedAt: i % 3 == 0 && token != nil ? Int64(i) : nil)
            let new = record.encoded()
            #expect(new.count <= record.maximumEncodedSize)
            let old = Self.legacyEncoding(record)
            for bytes in [new, old] {
                let decoded = try bytes.withUnsafeBytes { try DeviceRecord(decoding: $0, at: "test") }
                #expect(decoded == record)
                let f = try #require(bytes.withUnsafeBytes { DeviceRecord.fields(of: $0) })
                #expect(f.live == (record.state == .live) && f.hasToken == (token != nil))
                #expect(f.deviceID.string == record.deviceID)
                if let token { #expect(f.token.string == token) }
            }
        }
        let sdk = DeviceRecord(deviceID: "0f8fad5b-d9cb-469f-a165-70867728950e", token: String(repeating: "ab", count: 32), platform: .ios, tokenTime: 1)
        #expect(Self.legacyEncoding(sdk).count == 122 && sdk.encoded().count == 59)
        // An FCM token of 163 characters: 166 bytes as text, 125 in the 6-bit form.
        let fcm = "cXb0RqIXTLOyH2kRmr7pa1:APA91b" + String(repeating: "Fq3_-Zk9", count: 16) + "Ab3-x_"
        let android = DeviceRecord(deviceID: "0f8fad5b-d9cb-469f-a165-70867728950e", token: fcm, platform: .android, tokenTime: 1)
        #expect(fcm.utf8.count == 163 && android.encoded().count == sdk.encoded().count - 34 + 125)
    }

    /// Since schema 13 a record's times take 6 bytes each when they are in 0 ..< 2^48 (flag 8),
    /// 8 otherwise; a record of schema 4…12, its times in 8 bytes without the flag, reads the same;
    /// the stored form made from the text form a build keeps is the one `encode` writes.
    @Test func timesTakeSixBytesWhenTheyFit() throws {
        let id = "0f8fad5b-d9cb-469f-a165-70867728950e", token = String(repeating: "ab", count: 32)
        let cases: [(Int64, Int64?, Int)] = [
            (0, nil, 59), (1_764_100_807_728, nil, 59), (1 << 48 - 1, 1 << 48 - 1, 65), (1_764_100_807_728, 1_764_100_807_000, 65),
            (1 << 48, nil, 61), (-1, nil, 61), (5, -5, 69), (5, 1 << 48, 69), (.max, .min, 69),
        ]
        for (tokenTime, rejectedAt, size) in cases {
            let record = DeviceRecord(deviceID: id, token: token, platform: .ios, tokenTime: tokenTime, rejectedAt: rejectedAt)
            let bytes = record.encoded()
            #expect(bytes.count == size, "\(tokenTime), \(rejectedAt.map { "\($0)" } ?? "-")")
            #expect(bytes[0] & DeviceRecord.shortTimesFlag == (size == 59 || size == 65 ? DeviceRecord.shortTimesFlag : 0))
            #expect(try bytes.withUnsafeBytes { try DeviceRecord(decoding: $0, at: "test") } == record)
            // From the text form, byte for byte.
            var text = [UInt8](repeating: 0, count: 22 + id.utf8.count + token.utf8.count)
            var stored = [UInt8](repeating: 0, count: record.maximumEncodedSize + 2)
            text.withUnsafeMutableBytes { record.encodeText(into: $0.baseAddress!) }
            let n = text.withUnsafeBytes { t in stored.withUnsafeMutableBytes { DeviceRecord.encodeStored(textForm: t, into: $0.baseAddress!) } }
            #expect(Array(stored.prefix(n)) == bytes)
            // The form before: each time in 8 bytes, no flag 8.
            let names = Array(bytes[(rejectedAt == nil ? 8 : 14)...])
            var before: [UInt8] = [bytes[0] & ~DeviceRecord.shortTimesFlag, bytes[1]]
            for time in [tokenTime] + (rejectedAt.map { [$0] } ?? []) { withUnsafeBytes(of: UInt64(bitPattern: time).bigEndian) { before += $0 } }
            if bytes[0] & DeviceRecord.shortTimesFlag != 0 {
                #expect(try (before + names).withUnsafeBytes { try DeviceRecord(decoding: $0, at: "test") } == record)
            }
        }
    }

    /// Damaged records are refused, not misread: truncated, an unknown form, a flag no version writes.
    @Test func damagedRecordsDoNotDecode() throws {
        let record = DeviceRecord(deviceID: "0f8fad5b-d9cb-469f-a165-70867728950e", token: String(repeating: "ab", count: 32), platform: .ios, tokenTime: 1)
        let bytes = record.encoded()
        for n in 0..<bytes.count {
            #expect(Array(bytes.prefix(n)).withUnsafeBytes { DeviceRecord.fields(of: $0) } == nil, "cut to \(n) bytes")
        }
        var unknownForm = bytes
        unknownForm[8] = 9
        #expect(unknownForm.withUnsafeBytes { DeviceRecord.fields(of: $0) } == nil)
        // A 6-bit name whose colon index is past its length, or whose length runs past the record.
        let fcm = DeviceRecord(deviceID: "d1", token: "abcdefghijklmnopqrstuv:APA91b" + String(repeating: "x_-9", count: 33) + "ab", platform: .android, tokenTime: 1)
        let f = fcm.encoded()
        let at = try #require(f.indices.dropLast(2).first { f[$0] == 5 && f[$0 + 1] == 163 && f[$0 + 2] == 22 })
        var badColon = f
        badColon[at + 2] = 163
        #expect(badColon.withUnsafeBytes { DeviceRecord.fields(of: $0) } == nil)
        var tooLong = f
        tooLong[at + 1] = 200
        #expect(tooLong.withUnsafeBytes { DeviceRecord.fields(of: $0) } == nil)
        #expect(f.withUnsafeBytes { DeviceRecord.fields(of: $0) }?.token.string == fcm.token)
        #expect(unknownForm.withUnsafeBytes { DeviceRecord.fields(of: $0) } == nil)
        var unknownFlag = bytes
        unknownFlag[0] |= 0x40
        #expect(unknownFlag.withUnsafeBytes { DeviceRecord.fields(of: $0) } == nil)
        #expect((bytes + [0]).withUnsafeBytes { DeviceRecord.fields(of: $0) } == nil)
    }

    /// A schema 3 store, its device records as text: read-only, it answers as
    /// before; opened for writing it is stamped with the current version, the writer finds its devices
    /// by name (a token moves off an old record), old and new records stream
    /// alike, and the audit finds them equal to the rebuild's compact ones.
    @Test func aSchema3StoreReadsAndAuditsClean() throws {
        let dir = TemporaryDirectory("device-forms-v3")
        let uuid = "0f8fad5b-d9cb-469f-a165-70867728950e", apns = String(repeating: "c0ffee", count: 10) + "abcd"
        do {
            let store = try TopicStore(directory: dir.path)
            try store.submitAndWait(Event(project: "demo", body: .token(deviceID: uuid, token: apns, platform: .ios)))
            try store.submitAndWait(Event(project: "demo", body: .token(deviceID: "D2", token: "fcm:APA91b-x", platform: .android)))
            try store.submitAndWait(Event(project: "demo", body: .register(deviceID: uuid, topics: [TopicSpec(code: "news")])))
            try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "D2", topics: [TopicSpec(code: "news")])))
            // As that version wrote them: every record with its names as text, and the stamp 3.
            let rewritten = try rewriteAsOlderSchema(store, store.tables.devices, schema: 3) { v in
                Self.legacyEncoding(try DeviceRecord(decoding: v, at: "test"))
            }
            #expect(rewritten == 2)
            store.close()
        }
        do {
            var readOnly = TopicStore.Options()
            readOnly.readOnly = true
            let store = try TopicStore(directory: dir.path, options: readOnly)
            defer { store.close() }
            try store.read { txn in
                #expect(try store.tables.storedSchemaVersion(txn) == 3)
                let d = try #require(try store.reader.device(1, deviceID: uuid, txn))
                #expect(d.record.token == apns && d.topics == ["news"])
                #expect(try RecipientCacheTests.recipients(store.reader, txn, project: "demo") == [uuid: apns, "D2": "fcm:APA91b-x"])
            }
        }
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        #expect(try store.read { txn in try store.tables.storedSchemaVersion(txn) } == ProjectionTables.schemaVersion)
        // The token moves from the old record of the UUID device to a new device; D2 registers a new topic.
        try store.submitAndWait(Event(project: "demo", body: .token(deviceID: "D3", token: apns, platform: .ios)))
        try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "D2", topics: [TopicSpec(code: "sport")])))
        try store.read { txn in
            let moved = try #require(try store.reader.device(1, deviceID: uuid, txn))
            #expect(moved.record.token == nil)
            #expect(try RecipientCacheTests.recipients(store.reader, txn, project: "demo") == ["D2": "fcm:APA91b-x", "D3": apns])
        }
        // D2's record was never rewritten (a register does not touch it): old beside new.
        let forms = try store.read { txn in
            try [1, 2, 3].map { ordinal -> UInt8 in try #require(try txn.get(store.tables.devices, [0, 0, 0, 1, 0, 0, 0, UInt8(ordinal - 1)]))[0] & 4 }
        }
        #expect(forms == [4, 0, 4])
        let report = try Audit.run(store)
        #expect(report.isClean && report.equivalentEncodings == 1)
    }

    /// The record format before schema 4, as those versions wrote it.
    static func legacyEncoding(_ r: DeviceRecord) -> [UInt8] {
        var out: [UInt8] = [(r.token != nil ? 1 : 0) | (r.rejectedAt != nil ? 2 : 0), r.platform?.rawValue ?? 0]
        for v in [UInt64(bitPattern: r.tokenTime), UInt64(bitPattern: r.rejectedAt ?? 0)] {
            out += withUnsafeBytes(of: v.bigEndian) { Array($0) }
        }
        for s in [r.deviceID, r.token ?? ""] {
            let u = Array(s.utf8)
            out += [UInt8(u.count >> 8), UInt8(u.count & 0xFF)] + u
        }
        return out
    }
}
