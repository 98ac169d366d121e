import Foundation
import LMDB
import Projections
import SubscriptionLog
import TopicStore

/// Which garbage rules run, and their thresholds.
public struct GarbageRules: Sendable {
    /// Forget devices that have neither a token nor a topic.
    public var devices = true
    /// Drop topics with no subscriber and no event since `topicIdle` ago.
    public var topics = true
    /// How long a topic must have been without events (nil: the retention window).
    public var topicIdle: RetentionDuration?
    /// Clear tokens a provider rejected more than `rejectedGrace` ago.
    public var tokens = true
    public var rejectedGrace = RetentionDuration(milliseconds: 30 * 86_400_000)
    public init() {}
}

/// The garbage found in one pass over the projections, as the events that remove it.
public struct GarbagePlan: Sendable {
    public var forgetDevices: [Event] = []
    public var dropTopics: [Event] = []
    public var expireTokens: [Event] = []
    public var events: [Event] { expireTokens + dropTopics + forgetDevices }
    public var isEmpty: Bool { forgetDevices.isEmpty && dropTopics.isEmpty && expireTokens.isEmpty }

    /// Scans every project of `store` in bounded read transactions.
    /// `topicHorizon`: a topic whose last change is at or before it is idle.
    /// `rejectedBefore`: a token rejected at or before this time (ms) has expired.
    /// A device whose rejected token expires and that has no topic is forgotten
    /// (one event), not expired and then forgotten.
    public static func scan(_ store: TopicStore, rules: GarbageRules, topicHorizon: UInt64, rejectedBefore: Int64,
                            progress: ((String, UInt64, UInt64) -> Void)? = nil) throws -> GarbagePlan {
        var plan = GarbagePlan()
        guard rules.devices || rules.topics || rules.tokens else { return plan }
        let reader = store.reader
        let tables = store.tables
        let projects = try store.read { txn in try reader.projects(txn) }
        for (name, record) in projects {
            let pid = record.id
            if rules.topics {
                // Without counting every topic's members: a topic without subscribers has no slices.
                let codes = try store.read { txn in try reader.idleTopicCodes(pid, changedAtOrBefore: topicHorizon, txn) }
                plan.dropTopics += codes.map { Event(project: name, body: .dropTopic(code: $0)) }
            }
            guard rules.devices || rules.tokens else { continue }
            // Which ordinals have a topic: one walk of device_topics (pid ‖ ordinal → list).
            let count = Int(record.nextOrdinal)
            var hasTopics = [Bool](repeating: false, count: count)
            var resume = withUnsafeBytes(of: pid.bigEndian) { Array($0) }
            var more = true
            while more {
                more = try store.read { txn -> Bool in
                    try txn.withCursor(tables.deviceTopics) { cursor in
                        var entry = try cursor.seek(atLeast: resume)
                        var n = 0
                        while let (key, value) = entry {
                            guard key.count == 8, key.loadBigEndian(at: 0, as: UInt32.self) == pid else { return false }
                            let ordinal = Int(key.loadBigEndian(at: 4, as: UInt32.self))
                            if ordinal < count, value.count > 0 { hasTopics[ordinal] = true }
                            n += 1
                            if n >= 50_000 {
                                resume = Array(key) + [0]  // the next key after this one
                                return true
                            }
                            entry = try cursor.next()
                        }
                        return false
                    }
                }
            }
            var ordinal: UInt32 = 0
            while Int(ordinal) < count {
                let end = UInt32(min(count, Int(ordinal) + 50_000))
                try store.read { txn in
                    // Each record read in place; only a device that is garbage is decoded, for its names
                    // (at 10M devices, decoding every record was a third of the plan's 9 s).
                    try reader.forEachDeviceState(pid, ordinals: ordinal..<end, txn) { o, hasToken, rejectedAt in
                        let topicless = !hasTopics[Int(o)]
                        let forgets: Bool
                        if hasToken {
                            guard rules.tokens, let rejected = rejectedAt, rejected <= rejectedBefore else { return }
                            forgets = rules.devices && topicless
                        } else {
                            guard rules.devices && topicless else { return }
                            forgets = true
                        }
                        guard let device = try reader.deviceRecord(pid, ordinal: o, txn) else { return }
                        if forgets {
                            plan.forgetDevices.append(Event(project: name, body: .forgetDevice(deviceID: device.deviceID)))
                        } else if let token = device.token {
                            plan.expireTokens.append(Event(project: name, body: .expireToken(token: token)))
                        }
                    }
                }
                progress?("plan", UInt64(end), UInt64(count))
                ordinal = end
            }
        }
        return plan
    }

    /// Drops the events whose condition no longer holds in the store's current
    /// state (a command may have arrived since the scan): called right before
    /// submitting, so the window for such a race is one short read.
    public func rechecked(_ store: TopicStore, topicHorizon: UInt64, rejectedBefore: Int64) throws -> GarbagePlan {
        let reader = store.reader
        // expire-token needs no recheck: the fold clears only a token that is still rejected.
        var out = GarbagePlan(forgetDevices: [], dropTopics: [], expireTokens: expireTokens)
        let names = Set((dropTopics + forgetDevices).map(\.project))
        try store.read { txn in
            var pids: [String: UInt32] = [:]
            for name in names {
                if let p = try reader.project(named: name, txn) { pids[name] = p.id }
            }
            for e in dropTopics {
                guard case .dropTopic(let code) = e.body, let p = pids[e.project],
                      let tid = try reader.topicID(p, code: code, txn), let t = try reader.topic(p, tid, txn),
                      t.subscribers == 0, t.lastChangeSeq <= topicHorizon else { continue }
                out.dropTopics.append(e)
            }
            // Each project's devices are found in one walk of its records, not one walk per device.
            var wanted: [String: Set<String>] = [:]
            for e in forgetDevices {
                if case .forgetDevice(let id) = e.body { wanted[e.project, default: []].insert(id) }
            }
            var ordinals: [String: [String: UInt32]] = [:]
            for (name, ids) in wanted {
                if let p = pids[name] { ordinals[name] = try reader.ordinals(p, deviceIDs: ids, txn) }
            }
            for e in forgetDevices {
                guard case .forgetDevice(let id) = e.body, let p = pids[e.project], let ordinal = ordinals[e.project]?[id],
                      let d = try reader.device(p, ordinal: ordinal, txn), d.topics.isEmpty else { continue }
                if d.record.token != nil {
                    guard let rejected = d.record.rejectedAt, rejected <= rejectedBefore else { continue }
                }
                out.forgetDevices.append(e)
            }
        }
        return out
    }
}
