import Foundation
import LMDB
import Projections
import SubscriptionLog
import TopicStore

/// Auditors' history questions, answered from the log (bounded read transactions).
///
/// The state shown after each entry follows the rules of `Fold.apply` for one
/// device or one topic; tests check it against replayed projections at every
/// point so the two cannot drift apart unnoticed. A compacted log starts after
/// its horizon: the answer then starts from the state in the snapshot there
/// (its first entry or point, at the horizon), and the events before it are in
/// the archive compaction wrote.
public enum History {
    // MARK: Device timeline

    /// One event in a device's life.
    public struct DeviceEntry: Sendable, Hashable {
        public enum Kind: String, Sendable {
            case token, register, unregister
            case unregisterAll = "unregister-all"
            /// A provider rejected the device's token.
            case tokenRejected = "token-rejected"
            /// A rejection that did not apply (an older rejection, or the token was registered again after it).
            case rejectionIgnored = "rejection-ignored"
            /// Another device registered this device's token, taking it away.
            case tokenTaken = "token-taken"
            /// Garbage collection forgot the idle device, or cleared its rejected token.
            case forgotten = "forgotten"
            case tokenExpired = "token-expired"
            /// The device as the compaction snapshot holds it: the log before is archived.
            case horizon = "compaction-horizon"
        }
        public var sequence: UInt64
        public var timestamp: Int64
        public var kind: Kind
        /// What the event said: topics, token, reason, other device.
        public var detail: String
        /// Topic codes subscribed after the event, sorted.
        public var topics: [String]
        /// Topics this event added or removed.
        public var subscribed: [String]
        public var unsubscribed: [String]
        /// The state after the event: live, rejected or no-token, or absent
        /// while the store has no such device (before its first token or
        /// register, after garbage collection forgot it).
        public var state: String
        public var token: String?
        public var platform: String?
    }

    public struct DeviceTimeline: Sendable {
        public var project: String
        public var deviceID: String
        public var entries: [DeviceEntry]
        /// The last sequence scanned.
        public var asOfSeq: UInt64
        /// The compaction horizon when the log was compacted: the last
        /// sequence of the archived history (nil when the log starts at 1).
        public var horizon: UInt64?
    }

    /// The timeline of `deviceID` in `project`.
    public static func device(_ deviceID: String, project: String, in store: TopicStore,
                              recordsPerReadTransaction: Int = 50_000,
                              progress: ((ReplayProgress) -> Void)? = nil) throws -> DeviceTimeline {
        try device(deviceID, project: project, in: store, recordsPerReadTransaction: recordsPerReadTransaction,
                   decodingEveryRecord: false, progress: progress)
    }

    /// `device`, decoding only the records that may concern the device
    /// (`RecordGlance`): those naming it, and those naming a token it held.
    /// `decodingEveryRecord` decodes the project's every record instead (the
    /// answer must be the same: the tests compare the two).
    package static func device(_ deviceID: String, project: String, in store: TopicStore,
                               recordsPerReadTransaction: Int = 50_000, decodingEveryRecord: Bool,
                               progress: ((ReplayProgress) -> Void)? = nil) throws -> DeviceTimeline {
        var token: String?
        var platform: Platform?
        var tokenTime: Int64 = 0
        var rejected = false
        var exists = false
        var topics = Set<String>()
        var entries: [DeviceEntry] = []
        func state() -> String { !exists ? "absent" : token == nil ? "no-token" : (rejected ? "rejected" : "live") }
        func add(_ sequence: UInt64, _ timestamp: Int64, _ kind: DeviceEntry.Kind, _ detail: String,
                 _ added: [String] = [], _ removed: [String] = []) {
            entries.append(DeviceEntry(sequence: sequence, timestamp: timestamp, kind: kind, detail: detail,
                                       topics: topics.sorted(), subscribed: added, unsubscribed: removed,
                                       state: state(), token: token, platform: platform.map { "\($0)" }))
        }
        func add(_ r: LogRecord, _ kind: DeviceEntry.Kind, _ detail: String, _ added: [String] = [], _ removed: [String] = []) {
            add(r.sequence, r.timestamp, kind, detail, added, removed)
        }
        try store.requireLog()
        let snapshot = try Replay.snapshot(of: store)
        if let snapshot {
            let held = try snapshot.read { reader, txn -> DeviceInfo? in
                guard let p = try reader.project(named: project, txn) else { return nil }
                return try reader.device(p.id, deviceID: deviceID, txn)
            }
            if let held {
                exists = true
                token = held.record.token
                platform = held.record.platform
                tokenTime = held.record.tokenTime
                rejected = held.record.rejectedAt != nil
                topics = Set(held.topics)
                add(snapshot.sequence, snapshot.timestamp, .horizon,
                    "as the compaction snapshot holds it (the events before are archived)")
            }
        }
        // Every token the device held, from the snapshot and from its token
        // events as the scan reads them: the records that name one of them
        // (another device taking it, a rejection, an expiry) are decoded too.
        let wanted = Array(deviceID.utf8)
        var heldTokens: [[UInt8]] = token.map { [Array($0.utf8)] } ?? []
        let select = { (glance: RecordGlance) -> Bool in
            if decodingEveryRecord { return true }
            let names = wanted.withUnsafeBytes { glance.mayName(deviceID: $0) }
            if names {
                if glance.kind == .token, let t = glance.token.map({ Array($0.utf8) }), !heldTokens.contains(t) {
                    heldTokens.append(t)
                }
                return true
            }
            return heldTokens.contains { held in held.withUnsafeBytes { glance.mayName(token: $0) } }
        }
        let (last, _) = try scan(store, project: project, recordsPerReadTransaction: recordsPerReadTransaction,
                                 progress: progress, selecting: select) { r in
            switch r.event.body {
            case .token(let d, let t, let p) where d == deviceID:
                exists = true
                token = t; platform = p; tokenTime = r.timestamp; rejected = false
                add(r, .token, "token \(t) (\(p))")
            case .token(let d, let t, _) where t == token:
                // The token moves to another device: this one loses it.
                token = nil; rejected = false
                add(r, .tokenTaken, "device \(d) registered this token")
            case .register(let d, let specs) where d == deviceID:
                exists = true
                var added: [String] = []
                for s in specs where topics.insert(s.code).inserted { added.append(s.code) }
                add(r, .register, "topics " + specs.map(\.code).joined(separator: ", "), added)
            case .unregister(let d, let codes) where d == deviceID:
                var removed: [String] = []
                for c in codes where topics.remove(c) != nil { removed.append(c) }
                add(r, .unregister, "topics " + codes.joined(separator: ", "), [], removed)
            case .unregisterAll(let d) where d == deviceID:
                let removed = topics.sorted()
                topics = []
                add(r, .unregisterAll, "every topic", [], removed)
            case .forgetDevice(let d) where d == deviceID && exists && topics.isEmpty && (token == nil || rejected):
                exists = false
                token = nil; platform = nil; rejected = false
                add(r, .forgotten, "garbage collection forgot the idle device")
            case .expireToken(let t) where t == token && rejected:
                token = nil; rejected = false
                add(r, .tokenExpired, "garbage collection cleared the rejected token")
            case .tokenRejected(let t, let at, let reason) where t == token:
                if !rejected && tokenTime <= at {
                    rejected = true
                    add(r, .tokenRejected, "provider rejected the token at \(TimeText.iso(at))" + (reason.isEmpty ? "" : ": \(reason)"))
                } else {
                    add(r, .rejectionIgnored, "rejection at \(TimeText.iso(at)) ignored"
                        + (rejected ? " (already rejected)" : " (the token was registered at \(TimeText.iso(tokenTime)), after it)"))
                }
            default:
                break
            }
        }
        return DeviceTimeline(project: project, deviceID: deviceID, entries: entries, asOfSeq: Swift.max(last, snapshot?.sequence ?? 0),
                              horizon: snapshot?.sequence)
    }

    // MARK: Topic flow

    /// A change in a topic's subscribers.
    public struct TopicPoint: Sendable, Hashable {
        public var sequence: UInt64
        public var timestamp: Int64
        public var deviceID: String
        /// +1 subscribe, -1 unsubscribe (0 for the state at the compaction horizon).
        public var change: Int
        /// register, unregister or unregister-all; compaction-horizon for the
        /// subscribers the snapshot holds, drop-topic when garbage collection
        /// removed the (empty) topic (both with deviceID empty, change 0).
        public var cause: String
        /// Subscribers after the change.
        public var subscribers: Int
    }

    /// The topic coming into being or being dropped.
    public struct TopicLifeEvent: Sendable, Hashable {
        public enum Kind: String, Sendable {
            /// The first register naming the topic while it did not exist.
            case created
            /// A `drop-topic` event that applied: garbage collection removed the empty topic.
            case dropped
        }
        public var kind: Kind
        public var sequence: UInt64
        /// Nil for a creation before the compaction horizon (the snapshot keeps no time).
        public var timestamp: Int64?
    }

    public struct TopicFlow: Sendable {
        public var project: String
        public var code: String
        /// Sequence and time of the event that first created the topic, as far
        /// as the log and snapshot show (the time is unknown for a topic created
        /// before the compaction horizon). See `lifecycle` for drops and re-creations.
        public var createdSeq: UInt64?
        public var createdAt: Int64?
        public var points: [TopicPoint]
        public var subscribers: Int { points.last?.subscribers ?? 0 }
        public var asOfSeq: UInt64
        /// The time the scan reached (the last record's timestamp).
        public var asOfTime: Int64?
        /// The compaction horizon when the log was compacted (see `DeviceTimeline.horizon`).
        public var horizon: UInt64?
        /// Every creation and drop in order: a topic that garbage collection
        /// dropped and a register made again reads created, dropped, created.
        public var lifecycle: [TopicLifeEvent] = []
        /// Whether the topic exists as of `asOfSeq`.
        public var exists: Bool { lifecycle.last?.kind == .created }
    }

    /// Subscribe/unsubscribe flow of topic `code` in `project`, with the count after each change.
    public static func topic(_ code: String, project: String, in store: TopicStore,
                             recordsPerReadTransaction: Int = 50_000,
                             progress: ((ReplayProgress) -> Void)? = nil) throws -> TopicFlow {
        try topic(code, project: project, in: store, recordsPerReadTransaction: recordsPerReadTransaction,
                  decodingEveryRecord: false, progress: progress)
    }

    /// `topic`, decoding only the records that may change the topic's
    /// subscribers or existence (`RecordGlance`): registers and unregisters
    /// naming it, every unregister-all, drop-topics naming it.
    /// `decodingEveryRecord` decodes the project's every record instead.
    package static func topic(_ code: String, project: String, in store: TopicStore,
                              recordsPerReadTransaction: Int = 50_000, decodingEveryRecord: Bool,
                              progress: ((ReplayProgress) -> Void)? = nil) throws -> TopicFlow {
        var members = Set<String>()
        var points: [TopicPoint] = []
        var createdSeq: UInt64?, createdAt: Int64?
        var lifecycle: [TopicLifeEvent] = []
        var lastTime: Int64?
        try store.requireLog()
        let snapshot = try Replay.snapshot(of: store)
        if let snapshot {
            let held = try snapshot.read { reader, txn -> (created: UInt64, members: [String])? in
                guard let p = try reader.project(named: project, txn), let tid = try reader.topicID(p.id, code: code, txn),
                      let record = try reader.storedTopic(p.id, tid, txn) else { return nil }
                var members: [String] = []
                for ordinal in try reader.bitmap(p.id, topic: tid, txn).toArray() {
                    guard let device = try reader.deviceRecord(p.id, ordinal: ordinal, txn) else {
                        throw ProjectionCorruption(place: "snapshot \(snapshot.sequence): devices/\(p.id)/\(ordinal)",
                                                   reason: "a subscriber of \(code) is missing")
                    }
                    members.append(device.deviceID)
                }
                return (record.createdSeq, members)
            }
            if let held {
                createdSeq = held.created
                lifecycle.append(TopicLifeEvent(kind: .created, sequence: held.created, timestamp: nil))
                members = Set(held.members)
                points.append(TopicPoint(sequence: snapshot.sequence, timestamp: snapshot.timestamp, deviceID: "", change: 0,
                                         cause: "compaction-horizon", subscribers: members.count))
            }
            lastTime = snapshot.timestamp
        }
        let wanted = Array(code.utf8)
        let select = { (glance: RecordGlance) -> Bool in
            if decodingEveryRecord { return true }
            switch glance.kind {
            case .register, .unregister, .dropTopic: return wanted.withUnsafeBytes { glance.mayName(topic: $0) }
            case .unregisterAll: return true
            case .token, .tokenRejected, .forgetDevice, .expireToken: return false
            }
        }
        let (last, lastScannedTime) = try scan(store, project: project, recordsPerReadTransaction: recordsPerReadTransaction,
                                               progress: progress, selecting: select) { r in
            switch r.event.body {
            case .register(let d, let specs) where specs.contains(where: { $0.code == code }):
                if createdSeq == nil { createdSeq = r.sequence; createdAt = r.timestamp }
                if lifecycle.last?.kind != .created {
                    lifecycle.append(TopicLifeEvent(kind: .created, sequence: r.sequence, timestamp: r.timestamp))
                }
                if members.insert(d).inserted {
                    points.append(TopicPoint(sequence: r.sequence, timestamp: r.timestamp, deviceID: d, change: 1,
                                             cause: "register", subscribers: members.count))
                }
            case .unregister(let d, let codes) where codes.contains(code):
                if members.remove(d) != nil {
                    points.append(TopicPoint(sequence: r.sequence, timestamp: r.timestamp, deviceID: d, change: -1,
                                             cause: "unregister", subscribers: members.count))
                }
            case .unregisterAll(let d):
                if members.remove(d) != nil {
                    points.append(TopicPoint(sequence: r.sequence, timestamp: r.timestamp, deviceID: d, change: -1,
                                             cause: "unregister-all", subscribers: members.count))
                }
            case .dropTopic(let c) where c == code && lifecycle.last?.kind == .created && members.isEmpty:
                // The fold drops only an existing topic without subscribers.
                lifecycle.append(TopicLifeEvent(kind: .dropped, sequence: r.sequence, timestamp: r.timestamp))
                points.append(TopicPoint(sequence: r.sequence, timestamp: r.timestamp, deviceID: "", change: 0,
                                         cause: "drop-topic", subscribers: 0))
            default:
                break
            }
        }
        if let lastScannedTime { lastTime = lastScannedTime }
        return TopicFlow(project: project, code: code, createdSeq: createdSeq, createdAt: createdAt,
                         points: points, asOfSeq: Swift.max(last, snapshot?.sequence ?? 0), asOfTime: lastTime,
                         horizon: snapshot?.sequence, lifecycle: lifecycle)
    }

    /// Calls `body` with each record of `project` that `select` picks, in
    /// bounded read transactions, in order; records of other projects, and
    /// those `select` passes over, are skipped before decoding (`select` sees
    /// each in order, as it is read). Returns the last sequence scanned and the
    /// timestamp of the last record of `project` scanned.
    static func scan(_ store: TopicStore, project: String, recordsPerReadTransaction: Int,
                     progress: ((ReplayProgress) -> Void)?, selecting select: (RecordGlance) -> Bool,
                     _ body: (LogRecord) throws -> Void) throws -> (last: UInt64, lastTime: Int64?) {
        let log = store.log
        let projectBytes = Array(project.utf8)
        guard let bounds = try store.read({ txn in try log.sequenceRange(txn) }) else { return (0, nil) }
        let end = bounds.upperBound
        var next = bounds.lowerBound
        var last: UInt64 = 0
        var lastTime: Int64?
        let generation = store.generation
        // Bounded transactions: at most this many records decoded, or four times as many skipped.
        let limit = recordsPerReadTransaction
        // Every record's link is followed, other projects' too, on a thread of its own: an
        // answer never comes from a record altered with its checksum recomputed (the scan
        // throws at it, as at a bad checksum). A fault the follower finds before one the
        // scan meets is the one thrown, as when the scan followed the chain itself.
        let follower = ChainFollower(store: store, from: next, through: end, after: try Replay.chainStart(of: store),
                                     recordsPerTransaction: 4 * limit)
        defer { follower.cancel() }
        while next <= end {
            var records: [LogRecord] = []
            var scanned = 0
            do { try store.read { txn in
                try log.walk(from: next, through: end, txn) { entry in
                    // A record missing or a key out of order: the history would be wrong from there on.
                    guard entry.kind == .inOrder else { throw ReplayError.damagedLog(LogIssue(entry), exportFrom: nil, through: nil) }
                    let seq = entry.sequence, bytes = entry.bytes
                    last = seq
                    scanned += 1
                    // Other projects' records are skipped undecoded, and so are those
                    // `select` passes over; one whose fields do not parse is decoded,
                    // which says what is wrong with it.
                    if RecordCodec.names(project: projectBytes, bytes) {
                        lastTime = try RecordCodec.timestamp(of: bytes, key: seq)
                        if RecordGlance(bytes).map(select) ?? true {
                            records.append(try RecordCodec.decode(bytes, key: seq))
                        }
                    }
                    return records.count < limit && scanned < 4 * limit
                }
            } } catch ReplayError.damagedLog(let issue, _, _) {
                _ = try follower.waitUntilVerified(through: issue.sequence &- 1)
                try ReplayError.checkNotCompacted(store, since: generation)
                throw ReplayError.damagedLog(issue, exportFrom: nil, through: nil)
            } catch let e as RecordCorruption {
                _ = try follower.waitUntilVerified(through: e.sequence)
                throw e
            }
            if scanned == 0 {
                _ = try follower.waitUntilVerified(through: next &- 1)
                try ReplayError.checkNotCompacted(store, since: generation)
                // Keys up to the log's last one, but none from `next` on that reads as a record due.
                throw ReplayError.damagedLog(LogIssue(sequence: next, kind: .gap, message: "records \(next)…\(end) are missing (the log's last key is \(end))",
                                                      missing: next...end), exportFrom: nil, through: nil)
            }
            next = last + 1
            for r in records { try body(r) }
            progress?(ReplayProgress(phase: "scan", done: last, total: end))
        }
        // The follower stops short without a fault only at a record missing or out of place,
        // which the scan read before it: the log changed between the two reads (compaction).
        if let damage = try follower.waitUntilVerified(through: last) {
            try ReplayError.checkNotCompacted(store, since: generation)
            throw ReplayError.damagedLog(damage, exportFrom: nil, through: nil)
        }
        return (last, lastTime)
    }
}
