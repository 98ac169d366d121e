import Foundation
import LMDB
import Projections
import Roaring
import SubscriptionLog
import TopicStore

/// Notifications queued in the store's own LMDB environment (auxiliary tables,
/// so they follow generation switches and are read by any process):
///
/// | table | key | value |
/// |---|---|---|
/// | `notifications` | id (36-byte UUID text) | the record as JSON, progress included |
/// | `notification_audience` | id | project id (u32 BE) ‖ portable roaring bitmap of the reachable device ordinals at `asOfSeq` |
/// | `notification_queue` | createdAt (i64 BE) ‖ id | empty: the notifications not yet completed, oldest first |
/// | `notification_opens` | id ‖ 0 ‖ button ‖ 0 ‖ device_id | i64 BE time of the first open |
///
/// A send is durable when `enqueue` returns: the record, its pinned audience and
/// its queue entry are committed in one write transaction (synced).
public final class SendQueue: Sendable {
    public static let recordsTable = "notifications"
    public static let audienceTable = "notification_audience"
    public static let queueTable = "notification_queue"
    public static let opensTable = "notification_opens"
    public static let allTables = [recordsTable, audienceTable, queueTable, opensTable]

    public let store: TopicStore
    private let signal = WakeSignal()

    public init(store: TopicStore) throws {
        self.store = store
        try store.openAuxiliary(Self.allTables)
    }

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    private static func table(_ name: String, _ tables: [String: Database]) throws -> Database {
        guard let db = tables[name] else { throw StoreError.readOnly }
        return db
    }

    // MARK: Queueing

    /// Validates and renders the payload (4 KB limits), resolves the audience in
    /// one snapshot, and commits the notification pinned to that snapshot's sequence.
    /// Also returns the topic codes the project does not have (empty sets in the audience).
    public func enqueue(project: String, topics: [String], expression: AudienceExpression, exprText: String?,
                        payload: JSONValue) throws -> (record: NotificationRecord, unknownTopics: [String]) {
        let content: NotificationContent
        do { content = try NotificationContent(payload: payload) } catch { throw error }
        let id = UUID().uuidString.lowercased()
        let sizeProblems = PayloadRenderer.checkSizes(content, messageID: id)
        if !sizeProblems.isEmpty { throw SendProblems(sizeProblems) }

        let reader = store.reader
        let (audience, reachable, ios, android) = try store.read { txn -> (Audience, Bitmap, Int, Int) in
            let a = try reader.audience(project: project, expression, txn)
            var r = try reader.reachable(a, txn)
            r.optimize()
            let ios = r.isEmpty ? 0 : r.intersectionCount(try reader.liveDevices(a.projectID, .ios, txn))
            let android = r.isEmpty ? 0 : r.intersectionCount(try reader.liveDevices(a.projectID, .android, txn))
            return (a, r, ios, android)
        }
        let now = Self.now()
        var record = NotificationRecord(id: id, project: project, projectID: audience.projectID, createdAt: now,
                                        priority: content.priority, topics: topics, expr: exprText, payload: payload,
                                        asOfSeq: audience.asOfSeq, totalDevices: reachable.count, iosCount: ios, androidCount: android)
        if record.totalDevices == 0 {
            record.status = .completed
            record.completedAt = now
        }
        var pinned = ByteBuffer.u32(audience.projectID)
        pinned += reachable.serialized()
        let idKey = Array(id.utf8)
        try store.writeAuxiliary { txn, tables in
            if record.status != .completed {
                // The queue is read oldest first in key order: creation time, then id. A
                // notification queued in the same millisecond as one still queued would sort by
                // its random id, so a project's second send could go out before its first. Its
                // time is taken past the newest queued one's instead.
                let queue = try Self.table(Self.queueTable, tables)
                let newest = try txn.withCursor(queue) { cursor -> Int64? in
                    guard let (key, _) = try cursor.last(), key.count >= 8 else { return nil }
                    return Int64(bitPattern: key.loadBigEndian(at: 0, as: UInt64.self))
                }
                if let newest, record.createdAt <= newest { record.createdAt = newest + 1 }
                try txn.put(queue, ByteBuffer.i64(record.createdAt) + idKey, [])
            }
            try txn.put(try Self.table(Self.recordsTable, tables), idKey, record.json.bytes)
            try txn.put(try Self.table(Self.audienceTable, tables), idKey, pinned)
        }
        if record.status != .completed { signal.signal() }
        return (record, audience.unknownTopics)
    }

    // MARK: Reading

    /// The record, when it exists and belongs to `project` (any project when nil).
    public func record(id: String, project: String? = nil) throws -> NotificationRecord? {
        let key = Array(id.utf8)
        return try store.readAuxiliary { txn, tables in
            guard let db = tables[Self.recordsTable], let v = try txn.get(db, key) else { return nil }
            let r = try NotificationRecord(decoding: Array(v), at: "notifications/\(id)")
            if let project, r.project != project { return nil }
            return r
        }
    }

    /// The pinned audience: project id and reachable ordinals.
    public func audience(id: String) throws -> (projectID: UInt32, devices: Bitmap)? {
        let key = Array(id.utf8)
        return try store.readAuxiliary { txn, tables in
            guard let db = tables[Self.audienceTable], let v = try txn.get(db, key) else { return nil }
            guard v.count >= 4 else { throw NotificationCorruption(place: "notification_audience/\(id)", reason: "\(v.count) bytes") }
            let pid = v.loadUnaligned(fromByteOffset: 0, as: UInt32.self).bigEndian
            let bitmap = try Bitmap(deserializing: UnsafeRawBufferPointer(rebasing: v[4...]))
            return (pid, bitmap)
        }
    }

    /// The oldest notification not yet completed.
    public func nextPending() throws -> String? {
        try store.readAuxiliary { txn, tables in
            guard let db = tables[Self.queueTable] else { return nil }
            return try txn.withCursor(db) { cursor in
                guard let (key, _) = try cursor.first() else { return nil }
                guard key.count > 8 else { throw NotificationCorruption(place: "notification_queue", reason: "key of \(key.count) bytes") }
                return String(decoding: key[8...], as: UTF8.self)
            }
        }
    }

    /// Ids of every notification not yet completed, oldest first.
    public func pending() throws -> [String] {
        try store.readAuxiliary { txn, tables in
            guard let db = tables[Self.queueTable] else { return [] }
            return try txn.withCursor(db) { cursor in
                var ids: [String] = []
                var entry = try cursor.first()
                while let (key, _) = entry {
                    if key.count > 8 { ids.append(String(decoding: key[8...], as: UTF8.self)) }
                    entry = try cursor.next()
                }
                return ids
            }
        }
    }

    // MARK: Progress

    /// Changes a record in one write transaction (read, change, write back); a
    /// record that becomes completed leaves the queue in the same transaction.
    @discardableResult
    public func update(id: String, _ change: (inout NotificationRecord) -> Void) throws -> NotificationRecord {
        let key = Array(id.utf8)
        return try store.writeAuxiliary { txn, tables in
            let records = try Self.table(Self.recordsTable, tables)
            guard let v = try txn.get(records, key) else { throw NotificationCorruption(place: "notifications/\(id)", reason: "missing") }
            var r = try NotificationRecord(decoding: Array(v), at: "notifications/\(id)")
            let before = r.status
            change(&r)
            r.updatedAt = max(r.updatedAt, Self.now())
            if r.status == .completed && before != .completed {
                r.completedAt = r.updatedAt
                _ = try txn.delete(try Self.table(Self.queueTable, tables), ByteBuffer.i64(r.createdAt) + key)
            }
            try txn.put(records, key, r.json.bytes)
            return r
        }
    }

    // MARK: Opens

    public enum OpenResult: Sendable, Equatable { case counted, alreadyCounted, notAddressed, unknownNotification, unknownButton }

    /// An app reports that `deviceID` opened notification `id` (or tapped `button`).
    /// Each (device, button) is counted once, so an app retrying does not inflate the counts,
    /// and only a device the notification was addressed to counts (`notAddressed` otherwise):
    /// one of its pinned audience, the devices with a live token at `asOfSeq`. So opens never
    /// exceed the devices sent to, whatever device ids a client makes up.
    public func recordOpen(id: String, project: String, deviceID: String, button: String?) throws -> OpenResult {
        let key = Array(id.utf8)
        let openKey = key + [0] + Array((button ?? "").utf8) + [0] + Array(deviceID.utf8)
        // Whether the device was addressed, from a read snapshot, so the writer is not held
        // while the device id is looked up. A device's ordinal never changes, and the pinned
        // audience never changes, so the answer holds in the write below.
        let reader = store.reader
        let addressed = try store.readAuxiliary { txn, tables -> Bool? in
            guard let db = tables[Self.audienceTable], let v = try txn.get(db, key) else { return nil }
            guard v.count >= 4 else { throw NotificationCorruption(place: "notification_audience/\(id)", reason: "\(v.count) bytes") }
            let pid = v.loadUnaligned(fromByteOffset: 0, as: UInt32.self).bigEndian
            guard let ordinal = try reader.ordinal(pid, deviceID: deviceID, txn) else { return false }
            let audience = try Bitmap(deserializing: UnsafeRawBufferPointer(rebasing: v[4...]))
            return audience.contains(ordinal)
        }
        let now = Self.now()
        return try store.writeAuxiliary { txn, tables in
            let records = try Self.table(Self.recordsTable, tables), opens = try Self.table(Self.opensTable, tables)
            guard let v = try txn.get(records, key) else { return .unknownNotification }
            var r = try NotificationRecord(decoding: Array(v), at: "notifications/\(id)")
            guard r.project == project else { return .unknownNotification }
            if let button {
                let content = try? NotificationContent(payload: r.payload)
                guard content?.buttons.contains(where: { $0.id == button }) ?? false else { return .unknownButton }
            }
            guard addressed == true else { return .notAddressed }
            if try txn.get(opens, openKey) != nil { return .alreadyCounted }
            try txn.put(opens, openKey, ByteBuffer.i64(now))
            if let button { r.buttonOpens[button, default: 0] += 1 } else { r.opens += 1 }
            r.updatedAt = max(r.updatedAt, now)
            try txn.put(records, key, r.json.bytes)
            return .counted
        }
    }

    // MARK: Retention

    /// Ids of the notifications completed before `cutoff` (ms since 1970), in id order.
    public static func completed(before cutoff: Int64, in store: TopicStore) throws -> [String] {
        try store.openAuxiliary(allTables)
        return try store.readAuxiliary { txn, tables in
            guard let records = tables[recordsTable] else { return [] }
            return try txn.withCursor(records) { cursor in
                var ids: [String] = []
                var entry = try cursor.first()
                while let (key, value) = entry {
                    let id = String(decoding: key, as: UTF8.self)
                    let r = try NotificationRecord(decoding: Array(value), at: "notifications/\(id)")
                    if r.status == .completed, let done = r.completedAt, done < cutoff { ids.append(id) }
                    entry = try cursor.next()
                }
                return ids
            }
        }
    }

    /// Removes completed notifications (`completed(before:in:)`): their records, pinned audiences
    /// and opens, in write transactions of at most `batch` notifications (a server's own writes get
    /// the lock between them). A completed notification never changes again, so none is
    /// rechecked. Their status is then 404, as for an id never sent.
    public static func remove(_ ids: [String], in store: TopicStore, batch: Int = 256) throws {
        var i = 0
        while i < ids.count {
            let chunk = ids[i..<min(ids.count, i + max(1, batch))]
            try store.writeAuxiliary { txn, tables in
                let records = try table(recordsTable, tables), audiences = try table(audienceTable, tables)
                let opens = try table(opensTable, tables)
                for id in chunk {
                    let key = Array(id.utf8)
                    _ = try txn.delete(records, key)
                    _ = try txn.delete(audiences, key)
                    let prefix = key + [0]
                    try txn.withCursor(opens) { cursor in
                        var entry = try cursor.seek(atLeast: prefix)
                        while let (k, _) = entry, k.starts(with: prefix) {
                            try cursor.deleteCurrent()
                            entry = try cursor.seek(atLeast: prefix)
                        }
                    }
                }
            }
            i += chunk.count
        }
    }

    // MARK: Waking the worker

    /// Blocks until a notification is queued or `timeout` seconds pass.
    public func waitForWork(timeout: Double) { signal.wait(timeout: timeout) }
    /// Wakes a waiting worker (also used to stop it).
    public func wake() { signal.signal() }
}

enum ByteBuffer {
    static func u32(_ v: UInt32) -> [UInt8] { withUnsafeBytes(of: v.bigEndian) { Array($0) } }
    static func i64(_ v: Int64) -> [UInt8] { withUnsafeBytes(of: v.bigEndian) { Array($0) } }
}

/// A level-triggered wake-up: a signal while nobody waits is kept for the next wait.
final class WakeSignal: @unchecked Sendable {
    private let condition = NSCondition()
    private var pending = false
    func signal() {
        condition.lock()
        pending = true
        condition.broadcast()
        condition.unlock()
    }
    func wait(timeout: Double) {
        condition.lock()
        let deadline = Date().addingTimeInterval(timeout)
        while !pending { if !condition.wait(until: deadline) { break } }
        pending = false
        condition.unlock()
    }
}
