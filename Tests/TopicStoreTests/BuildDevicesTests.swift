import Foundation
@testable import Projections
import SubscriptionLog
import Testing

/// A build holds its device records as bytes in the text form (`BuildDevices`)
/// and writes them in the stored form: both must be exactly the formats the
/// rest of the store reads, and the arena must give back what was put last.
@Suite struct BuildDevicesTests {
    static func randomRecord(_ rng: inout SeededRandom, _ i: Int) -> DeviceRecord {
        let token: String? = rng.int(5) == 0 ? nil : DeviceRecordFormTests.randomName(&rng)
        return DeviceRecord(deviceID: DeviceRecordFormTests.randomName(&rng), token: token,
                            platform: token == nil ? nil : (rng.int(2) == 0 ? .ios : .android),
                            tokenTime: Int64(rng.int(1 << 40)),
                            rejectedAt: token != nil && rng.int(3) == 0 ? Int64(rng.int(1 << 40)) : nil)
    }

    static func textForm(_ r: DeviceRecord) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: r.textFormSize) { b, n in
            r.encodeText(into: UnsafeMutableRawPointer(b.baseAddress!))
            n = r.textFormSize
        }
    }

    /// The text form is the format before schema 4 byte for byte, and packs
    /// into exactly what `encoded()` writes; a name matches its own record only.
    @Test func theTextFormIsTheOldFormatAndPacksToTheStoredOne() throws {
        var rng = SeededRandom(seed: 11)
        for i in 0..<3_000 {
            let record = Self.randomRecord(&rng, i)
            let text = Self.textForm(record)
            #expect(text == DeviceRecordFormTests.legacyEncoding(record))
            let stored = [UInt8](unsafeUninitializedCapacity: text.count + 2) { b, n in
                n = text.withUnsafeBytes { DeviceRecord.encodeStored(textForm: $0, into: UnsafeMutableRawPointer(b.baseAddress!)) }
            }
            #expect(stored == record.encoded())
            let other = DeviceRecordFormTests.randomName(&rng)
            text.withUnsafeBytes { b in
                Array(record.deviceID.utf8).withUnsafeBytes { #expect(DeviceRecord.textForm(b, hasDeviceID: $0)) }
                Array(other.utf8).withUnsafeBytes {
                    #expect(DeviceRecord.textForm(b, hasDeviceID: $0) == (other == record.deviceID))
                    #expect(DeviceRecord.textForm(b, holds: $0) == (other == record.token))
                }
                if let token = record.token {
                    Array(token.utf8).withUnsafeBytes { #expect(DeviceRecord.textForm(b, holds: $0)) }
                }
                // A device without a token holds no name, not even its device_id or the empty one.
                if record.token == nil {
                    Array(record.deviceID.utf8).withUnsafeBytes { #expect(!DeviceRecord.textForm(b, holds: $0)) }
                    #expect(!DeviceRecord.textForm(b, holds: UnsafeRawBufferPointer(start: nil, count: 0)))
                }
            }
        }
    }

    /// Random puts (longer, shorter, of the same length), token changes,
    /// rejections, deletes and reads over three projects, against a dictionary; then the
    /// write-out's order and bytes.
    @Test func heldRecordsFollowAModel() throws {
        var rng = SeededRandom(seed: 12)
        let devices = BuildDevices(reserving: 64)  // grows many times
        devices.reserve(devices: 10)
        var model: [Pair: DeviceRecord?] = [:]
        let pids: [UInt32] = [7, 2, 900]
        for step in 0..<20_000 {
            let key = Pair(pid: pids[rng.int(3)], ordinal: UInt32(rng.int(300)))
            switch rng.int(11) {
            case 0:
                devices.put(nil, key.pid, key.ordinal)
                model[key] = .some(nil)
            case 1...5:
                var record = Self.randomRecord(&rng, step)
                // Often the same device again with another token: a record grows or shrinks in place.
                if let old = model[key], let old { record.deviceID = old.deviceID }
                devices.put(record, key.pid, key.ordinal)
                model[key] = .some(record)
            case 6, 7:
                // A token change: a new token (longer or shorter: in place or appended) or the one held.
                let token = rng.int(4) == 0 ? (model[key]??.token ?? "") : DeviceRecordFormTests.randomName(&rng)
                let platform: Platform = rng.int(2) == 0 ? .ios : .android
                let time = Int64(rng.int(1 << 40))
                let held = try token.withUTF8Bytes {
                    try devices.replaceToken(key.pid, key.ordinal, with: NameText($0), platform: platform, tokenTime: time)
                }
                switch model[key] {
                case .none: #expect(held == nil, "\(key) at step \(step)")
                case .some(.none): #expect(held == .some(nil), "\(key) at step \(step)")
                case .some(.some(var r)):
                    let expected = HeldToken(platform: r.platform, live: r.state == .live,
                                             token: r.token.map { $0 == token ? .same : .other(hash: OrdinalIndex.hash(key.pid, $0)) } ?? .none)
                    #expect(held == .some(expected), "\(key) at step \(step)")
                    (r.token, r.platform, r.tokenTime, r.rejectedAt) = (token, platform, time, nil)
                    model[key] = .some(r)
                }
            case 8:
                // A rejection of the token a device holds, marked in place.
                let at = Int64(rng.int(1 << 40))
                switch model[key] {
                case .none: #expect(devices.markRejected(key.pid, key.ordinal, at: at) == nil)
                case .some(.none): #expect(devices.markRejected(key.pid, key.ordinal, at: at) == false)
                case .some(.some(var r)):
                    guard r.token != nil else { continue }
                    #expect(devices.markRejected(key.pid, key.ordinal, at: at) == true)
                    r.rejectedAt = at
                    model[key] = .some(r)
                }
            default:
                let held = try devices.record(key.pid, key.ordinal)
                #expect(held == model[key], "\(key) at step \(step)")
                let probe = rng.int(2) == 0 ? DeviceRecordFormTests.randomName(&rng)
                    : (model[key]??.deviceID ?? "")
                let matchesID = probe.withUTF8Bytes { devices.device(key.pid, key.ordinal, matches: .deviceID, NameText($0)) }
                let matchesToken = probe.withUTF8Bytes { devices.device(key.pid, key.ordinal, matches: .token, NameText($0)) }
                switch model[key] {
                case .none: #expect(matchesID == nil && matchesToken == nil)
                case .some(.none): #expect(matchesID == false && matchesToken == false)
                case .some(.some(let r)): #expect(matchesID == (r.deviceID == probe) && matchesToken == (r.token == probe))
                }
            }
        }
        #expect(devices.abandoned > 0)
        var seen: [Pair] = []
        var decoded: [Pair: DeviceRecord?] = [:]
        devices.forEachInKeyOrder { pid, ordinal, bytes in
            seen.append(Pair(pid: pid, ordinal: ordinal))
            // (`updateValue`: assigning nil through the subscript would remove the key.)
            decoded.updateValue(bytes.map { try! DeviceRecord(decoding: $0, at: "test") }, forKey: Pair(pid: pid, ordinal: ordinal))
        }
        #expect(seen == model.keys.sorted())
        #expect(decoded == model)
        // The write-out's blocks, small enough that the encoder waits for spare
        // ones many times, and a record longer than a block now and then.
        for blockBytes in [64, 300, 1 << 20] {
            var written: [Pair] = []
            let encoded = EncodedDevices(devices, blockBytes: blockBytes, blocksHeld: 2)
            try encoded.forEach { pid, ordinal, record in
                let k = Pair(pid: pid, ordinal: ordinal)
                written.append(k)
                #expect(record.map { Array($0) } == model[k]!.map { $0.encoded() }, "\(k), blocks of \(blockBytes) bytes")
            }
            #expect(written == seen, "blocks of \(blockBytes) bytes")
        }
    }

    /// A write that fails midway (a full map) or never reaches the devices
    /// ends the encoding thread, which may be waiting for a spare block.
    @Test func anEncoderLeftMidwayEnds() throws {
        var rng = SeededRandom(seed: 13)
        let devices = BuildDevices()
        for ordinal in 0..<2_000 { devices.put(Self.randomRecord(&rng, ordinal), 3, UInt32(ordinal)) }
        struct Full: Error {}
        for round in 0..<50 {
            let encoded = EncodedDevices(devices, blockBytes: 256, blocksHeld: 2)
            // Two blocks of 256 bytes hold a few records of 2,000: the encoder
            // waits for the writer, and is seen (once it has named itself).
            if round == 0 {
                var seen = 0
                for _ in 0..<500 where seen == 0 {
                    seen = try Self.threads(named: "build-devices")
                    if seen == 0 { usleep(10_000) }
                }
                #expect(seen >= 1)
            }
            if round % 2 == 0 {
                var taken = 0
                #expect(throws: Full.self) {
                    try encoded.forEach { _, _, _ in
                        taken += 1
                        if taken == 10 * round + 1 { throw Full() }
                    }
                }
            } else {
                encoded.close()
            }
        }
        // Each `close` waited for its thread: none of the 50 is left (a rebuild
        // of another test running meanwhile may hold one or two).
        let left = try Self.threads(named: "build-devices")
        #expect(left < 10, "\(left) encoding threads left")
    }

    /// The threads of this process that have `name` (Linux: /proc/self/task).
    static func threads(named name: String) throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").filter { tid in
            (try? String(contentsOfFile: "/proc/self/task/\(tid)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) == name
        }.count
    }

    struct Pair: Hashable, Comparable, CustomStringConvertible {
        var pid: UInt32, ordinal: UInt32
        static func < (a: Pair, b: Pair) -> Bool { (a.pid, a.ordinal) < (b.pid, b.ordinal) }
        var description: String { "\(pid)/\(ordinal)" }
    }
}
