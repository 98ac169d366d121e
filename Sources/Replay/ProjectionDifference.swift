import LMDB
import Projections
import Roaring
import SubscriptionLog

/// One projection entry on which the live store and the rebuild disagree,
/// said the way an operator reads it.
public struct ProjectionDifference: Sendable, Hashable, CustomStringConvertible {
    /// The table: meta, projects, devices, topics, topic_codes, postings, device_topics.
    public var table: String
    /// The project (tenant) name, when the entry belongs to one.
    public var project: String?
    /// What the entry is about: `topic news`, `device D17`, `token abc…`, `device D17 in topic news`.
    public var subject: String
    /// What each side holds; nil when the entry is absent on that side.
    public var live: String?
    public var rebuilt: String?
    /// The log sequence both sides reflected when they were compared.
    public var asOfSeq: UInt64

    public var description: String {
        let place = (project.map { "project \($0), " } ?? "") + subject
        return "\(table): \(place): live \(live ?? "has no entry"); rebuild \(rebuilt ?? "has no entry") (as of seq \(asOfSeq))"
    }
}

/// Names keys and values of the projection tables for a difference report,
/// looking things up in the snapshot of the side that holds them.
struct DifferenceDescriber {
    let tables: (live: ProjectionTables, rebuilt: ProjectionTables)
    private var projectNames: [UInt32: String] = [:]

    init(live: ProjectionTables, rebuilt: ProjectionTables) { tables = (live, rebuilt) }

    /// Built-in sets kept beside a project's topics (mirrors `ProjectionTables.BuiltIn`).
    static let builtInNames: [UInt32: String] = [0: "platform:ios (live tokens)", 1: "platform:android (live tokens)",
                                                 2: "devices:all (known devices)"]

    mutating func describe(table: String, key: [UInt8], live: [UInt8]?, rebuilt: [UInt8]?, asOf: UInt64,
                           _ liveTxn: borrowing Transaction, _ rebuiltTxn: borrowing Transaction) -> ProjectionDifference {
        var d = ProjectionDifference(table: table, project: nil, subject: "key \(hex(key))", live: nil, rebuilt: nil, asOfSeq: asOf)
        let liveReader = ProjectionReader(tables: tables.live)
        let rebuiltReader = ProjectionReader(tables: tables.rebuilt)
        func u32(_ b: [UInt8], _ at: Int) -> UInt32 {
            b.withUnsafeBytes { $0.loadBigEndian(at: at, as: UInt32.self) }
        }
        let pid: UInt32? = table != "meta" && table != "projects" && key.count >= 4 ? u32(key, 0) : nil
        if let pid {
            d.project = projectName(pid, liveTxn, rebuiltTxn) ?? "#\(pid)"
        }
        // Either side's view of a device or topic, to name what a key points at.
        func deviceID(_ pid: UInt32, _ ordinal: UInt32, _ l: borrowing Transaction, _ r: borrowing Transaction) -> String {
            if let rec = try? liveReader.deviceRecord(pid, ordinal: ordinal, l) { return rec.deviceID }
            if let rec = try? rebuiltReader.deviceRecord(pid, ordinal: ordinal, r) { return rec.deviceID }
            return "#\(ordinal)"
        }
        func topicName(_ pid: UInt32, _ tid: UInt32, _ l: borrowing Transaction, _ r: borrowing Transaction) -> String {
            if let t = try? liveReader.storedTopic(pid, tid, l) { return "topic \(t.code)" }
            if let t = try? rebuiltReader.storedTopic(pid, tid, r) { return "topic \(t.code)" }
            if let b = Self.builtInNames[tid] { return b }
            return "topic #\(tid)"
        }
        switch table {
        case "meta":
            d.subject = "meta " + String(decoding: key, as: UTF8.self)
            d.live = live.map(integerText)
            d.rebuilt = rebuilt.map(integerText)
        case "projects":
            d.project = String(decoding: key, as: UTF8.self)
            d.subject = "project record"
            func text(_ r: ProjectRecord?) -> String? { r.map { "id \($0.id), next ordinal \($0.nextOrdinal), next topic id \($0.nextTopicID)" } }
            // As stored: a record that decodes but cannot be right is shown, not called undecodable.
            func decoded(_ v: [UInt8]) -> ProjectRecord? { v.withUnsafeBytes { try? ProjectRecord(decoding: $0, at: "") } }
            d.live = live.map { text(decoded($0)) ?? "undecodable \(hex($0))" }
            d.rebuilt = rebuilt.map { text(decoded($0)) ?? "undecodable \(hex($0))" }
        case "devices" where key.count == 8:
            let o = u32(key, 4)
            d.subject = "device \(deviceID(pid!, o, liveTxn, rebuiltTxn)) (ordinal \(o))"
            func text(_ r: DeviceRecord?) -> String? {
                r.map { "device_id \($0.deviceID), token \($0.token ?? "none"), platform \($0.platform.map { "\($0)" } ?? "none"), state \($0.state.rawValue), token time \($0.tokenTime)" + ($0.rejectedAt.map { ", rejected at \($0)" } ?? "") }
            }
            d.live = live == nil ? nil : (text(try? liveReader.deviceRecord(pid!, ordinal: o, liveTxn)) ?? "undecodable \(hex(live!))")
            d.rebuilt = rebuilt == nil ? nil : (text(try? rebuiltReader.deviceRecord(pid!, ordinal: o, rebuiltTxn)) ?? "undecodable \(hex(rebuilt!))")
        case "topics" where key.count == 8:
            let tid = u32(key, 4)
            d.subject = topicName(pid!, tid, liveTxn, rebuiltTxn) + " (id \(tid))"
            func text(_ t: TopicRecord?) -> String? {
                t.map { "code \($0.code), title \"\($0.title)\", single \($0.single), \($0.subscribers) subscribers, created seq \($0.createdSeq), last change seq \($0.lastChangeSeq)" }
            }
            d.live = live == nil ? nil : (text(try? liveReader.topic(pid!, tid, liveTxn)) ?? "undecodable \(hex(live!))")
            d.rebuilt = rebuilt == nil ? nil : (text(try? rebuiltReader.topic(pid!, tid, rebuiltTxn)) ?? "undecodable \(hex(rebuilt!))")
        case "topic_codes":
            d.subject = "topic \(ProjectionTables.topicCode(ofKey: key) ?? hex(key))"
            d.live = live.map { $0.count == 4 ? "topic id \(u32($0, 0))" : hex($0) }
            d.rebuilt = rebuilt.map { $0.count == 4 ? "topic id \(u32($0, 0))" : hex($0) }
        case "postings" where key.count == 10:
            let high = key.withUnsafeBytes { $0.loadBigEndian(at: 4, as: UInt16.self) }
            let tid = u32(key, 6)
            d.subject = topicName(pid!, tid, liveTxn, rebuiltTxn) + " members, ordinals \(UInt32(high) << 16)…\(UInt32(high) << 16 | 0xFFFF)"
            let l = live.flatMap { v in v.withUnsafeBytes { try? Bitmap(chunk: $0, high: high) } }
            let r = rebuilt.flatMap { v in v.withUnsafeBytes { try? Bitmap(chunk: $0, high: high) } }
            func members(_ b: Bitmap?, _ raw: [UInt8]?, extra: Bitmap?) -> String? {
                guard let raw else { return nil }
                guard let b else { return "undecodable container \(hex(Array(raw.prefix(32))))" }
                var text = "\(b.count) devices"
                if let extra, !extra.isEmpty {
                    let shown = extra.toArray().prefix(8).map { deviceID(pid!, $0, liveTxn, rebuiltTxn) }
                    text += ", including \(extra.count) the other side lacks: " + shown.joined(separator: ", ")
                        + (extra.count > 8 ? ", …" : "")
                }
                return text
            }
            d.live = members(l, live, extra: l.map { $0.subtracting(r ?? Bitmap()) })
            d.rebuilt = members(r, rebuilt, extra: r.map { $0.subtracting(l ?? Bitmap()) })
        case "device_topics" where key.count == 8:
            let o = u32(key, 4)
            d.subject = "device \(deviceID(pid!, o, liveTxn, rebuiltTxn)) topics"
            func text(_ v: [UInt8]?) -> String? {
                guard let v else { return nil }
                guard let ids = v.withUnsafeBytes({ DeviceTopics.decode($0) }) else { return "undecodable \(hex(v))" }
                return ids.map { topicName(pid!, $0, liveTxn, rebuiltTxn).replacingOccurrences(of: "topic ", with: "") }.joined(separator: ", ")
            }
            d.live = text(live)
            d.rebuilt = text(rebuilt)
        default:
            d.live = live.map(hex)
            d.rebuilt = rebuilt.map(hex)
        }
        return d
    }

    private mutating func projectName(_ pid: UInt32, _ l: borrowing Transaction, _ r: borrowing Transaction) -> String? {
        if let n = projectNames[pid] { return n }
        for (t, txn) in [(tables.live, 0), (tables.rebuilt, 1)] {
            let reader = ProjectionReader(tables: t)
            let list = txn == 0 ? (try? reader.projects(l, checked: false)) : (try? reader.projects(r, checked: false))
            for (name, record) in list ?? [] where projectNames[record.id] == nil { projectNames[record.id] = name }
        }
        return projectNames[pid]
    }

    private func integerText(_ v: [UInt8]) -> String {
        v.withUnsafeBytes { b in
            switch b.count {
            case 4: return "\(b.loadBigEndian(at: 0, as: UInt32.self))"
            case 8: return "\(b.loadBigEndian(at: 0, as: UInt64.self))"
            default: return hex(v)
            }
        }
    }
}

func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    out.reserveCapacity(bytes.count * 2)
    for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 0xF)]) }
    return String(decoding: out, as: UTF8.self)
}
