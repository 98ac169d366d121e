import LMDB
import Roaring
import SubscriptionLog

/// What a send service asks before a send: how many devices, on which platform.
public struct AudienceCounts: Sendable, Hashable {
    /// The log sequence the snapshot reflects.
    public var asOfSeq: UInt64
    /// Distinct devices in the audience.
    public var total: Int
    /// Devices with a live iOS / Android token.
    public var ios: Int
    public var android: Int
    /// Devices in the audience that cannot be reached: no token, or a rejected one.
    public var withoutToken: Int
    /// Topic codes named that the project does not have.
    public var unknownTopics: [String]
}

/// One device to push to.
public struct Recipient: Sendable, Hashable {
    public var ordinal: UInt32
    public var deviceID: String
    public var platform: Platform
    public var token: String
}

/// An audience resolved in one snapshot: its bitmap of device ordinals.
public struct Audience: Sendable {
    public let project: String
    public let projectID: UInt32
    public let asOfSeq: UInt64
    /// Every device in the audience, reachable or not.
    public let devices: Bitmap
    public let unknownTopics: [String]
}

extension ProjectionReader {
    /// Resolves `expression` for `project` in the snapshot of `txn`.
    /// An unknown project is an empty audience.
    public func audience(project: String, _ expression: AudienceExpression, _ txn: borrowing Transaction) throws -> Audience {
        let asOf = try appliedSequence(txn)
        guard let p = try self.project(named: project, txn) else {
            return Audience(project: project, projectID: 0, asOfSeq: asOf, devices: Bitmap(),
                            unknownTopics: Array(Set(expression.topicCodes)).sorted())
        }
        var evaluation = AudienceEvaluation(reader: self, pid: p.id, asOf: asOf)
        let devices = try evaluation.evaluate(expression, txn)
        return Audience(project: project, projectID: p.id, asOfSeq: asOf, devices: devices, unknownTopics: evaluation.unknown.sorted())
    }

    /// Where topic `code` of project `pid` has its members in the snapshot of
    /// `txn` (at sequence `asOf`); nil when the project has no such topic.
    /// From the topic cache where it holds the snapshot's topic; else read
    /// (the code, the topic's record, and, with a cache, the chunk of a single
    /// topic in one slice, to hold its members when they are few) and offered
    /// to the cache. Only single topics are probed (in the compact layout their
    /// ids carry `singleTopicBit`): they are what a list of users names, and
    /// another small topic's chunk would be read twice on a miss.
    func placement(_ pid: UInt32, code: String, asOf: UInt64, _ txn: borrowing Transaction) throws -> TopicCache.Placement? {
        if let held = topicCache?.placement(pid, code: code, asOf: asOf) { return held }
        guard let tid = try topicID(pid, code: code, txn) else { return nil }
        let slices = try self.slices(pid, tid, txn) ?? []  // no record, no members
        var placed = TopicCache.Placement.slices(tid: tid, slices)
        if topicCache != nil, tid & ProjectionTables.singleTopicBit != 0, slices.count == 1,
           let chunk = try Keys.withChunk(pid, tid, slices[0], { try txn.get(tables.postings, $0) }) {
            var few = GatheredValues(limit: TopicCache.inlineMembers)
            if few.append(slice: slices[0], stored: chunk) {
                placed = .members(tid: tid, few.withValues(from: 0) { Array($0) })
            }
        }
        topicCache?.offer(pid, code: code, placed, readAt: asOf)
        return placed
    }

    /// The members of a placed topic as a bitmap.
    func bitmap(_ pid: UInt32, _ placed: TopicCache.Placement, _ txn: borrowing Transaction) throws -> Bitmap {
        switch placed {
        case .members(_, let members): return Bitmap(members)
        case .slices(let tid, let slices):
            return try PostingChunk.read(pid: pid, topic: tid, slices: slices, required: true, tables: tables, txn)
        }
    }

    /// Gathers the members of a placed topic into `gathered` when they fit (see
    /// `PostingChunk.gather`); false, with nothing gathered, when they do not.
    func gather(_ pid: UInt32, _ placed: TopicCache.Placement, into gathered: inout GatheredValues,
                _ txn: borrowing Transaction) throws -> Bool {
        switch placed {
        case .members(_, let members): return members.withUnsafeBufferPointer { gathered.append($0) }
        case .slices(let tid, let slices):
            return try PostingChunk.gather(pid: pid, topic: tid, slices: slices, into: &gathered, tables: tables, txn)
        }
    }

    /// Counts of an audience: total, per platform, and unreachable.
    public func counts(of audience: Audience, _ txn: borrowing Transaction) throws -> AudienceCounts {
        var ios = 0, android = 0
        if let held = smallAudienceLiveCounts(audience, slices: audience.devices.sliceCount) {
            (ios, android) = held
        } else if case let slices = audience.devices.sliceKeys, !slices.isEmpty {
            // Only the live slices the audience reaches into are read, each in
            // place: a one-device audience reads two small containers, not the
            // whole platform sets. The two live sets of a slice are adjacent
            // keys (`pid ‖ high ‖ 0` and `‖ 1`): one seek, one step.
            let pid = audience.projectID
            let iosTopic = ProjectionTables.BuiltIn.liveIOS, androidTopic = ProjectionTables.BuiltIn.liveAndroid
            var liveSets = LiveChunkReader(self, pid: pid, asOf: audience.asOfSeq)
            defer { withExtendedLifetime(liveSets) {} }
            try txn.withCursor(tables.postings) { cursor in
                for high in slices {
                    let live = try liveSets.chunks(high, &cursor)
                    // Both counted at once (a slice of many runs, `all`, is spread into a bitset
                    // once for both); one by one when a chunk is not well-formed, which reports it.
                    if let (i, a) = audience.devices.intersectionCounts(inSlice: high, live.ios, live.android) {
                        ios += i
                        android += a
                        continue
                    }
                    if let stored = live.ios {
                        ios += try Self.intersectionCount(audience.devices, high: high, stored: stored, pid: pid, topic: iosTopic)
                    }
                    if let stored = live.android {
                        android += try Self.intersectionCount(audience.devices, high: high, stored: stored, pid: pid, topic: androidTopic)
                    }
                }
            }
        }
        let total = audience.devices.count
        return AudienceCounts(asOfSeq: audience.asOfSeq, total: total, ios: ios, android: android,
                              withoutToken: total - ios - android, unknownTopics: audience.unknownTopics)
    }

    /// The stored chunks of both platforms' live sets in slice `high` (nil:
    /// none), borrowed from the snapshot. They are adjacent keys (`pid ‖ high ‖
    /// 0` and `‖ 1`): one seek, one step. `key` is a chunk key of `pid` to reuse.
    static func liveChunks(_ pid: UInt32, _ high: UInt16, key: inout [UInt8], _ cursor: inout Cursor) throws
        -> (ios: UnsafeRawBufferPointer?, android: UnsafeRawBufferPointer?) {
        let iosTopic = ProjectionTables.BuiltIn.liveIOS, androidTopic = ProjectionTables.BuiltIn.liveAndroid
        key[4] = UInt8(high >> 8); key[5] = UInt8(high & 0xFF)
        var entry = try cursor.seek(atLeast: key)
        var live: (ios: UnsafeRawBufferPointer?, android: UnsafeRawBufferPointer?) = (nil, nil)
        for topic in iosTopic...androidTopic {
            guard let (k, stored) = entry, k.count == 10, k.loadBigEndian(at: 0, as: UInt32.self) == pid,
                  k.loadBigEndian(at: 4, as: UInt16.self) == high, k.loadBigEndian(at: 6, as: UInt32.self) == topic else { continue }
            if topic == iosTopic { live.ios = stored } else { live.android = stored }
            entry = try cursor.next()
        }
        return live
    }

    /// The live counts of an audience of a few devices per slice (a send to a
    /// list of users) from the recipient cache, where it holds the snapshot's
    /// records: a record or two read from memory per device, where the
    /// snapshot's live sets cost a B-tree search and two containers per slice.
    private func smallAudienceLiveCounts(_ audience: Audience, slices: Int) -> (ios: Int, android: Int)? {
        guard let cache = recipientCache, slices > 0, audience.devices.count <= 16 * slices else { return nil }
        return cache.liveCounts(audience.projectID, audience.devices, asOf: audience.asOfSeq)
    }

    /// The devices of `devices` in slice `high` that the stored chunk of
    /// `topic` also holds: counted in place, or, when the chunk is not one
    /// well-formed container of that slice, decoded (which reports what is wrong).
    static func intersectionCount(_ devices: Bitmap, high: UInt16, stored: UnsafeRawBufferPointer,
                                  pid: UInt32, topic: UInt32) throws -> Int {
        if let n = devices.intersectionCount(inSlice: high, stored: stored) { return n }
        return devices.intersectionCount(try PostingChunk.decode(stored, pid: pid, topic: topic, high: high))
    }

    /// The devices of `audience` that have a live token.
    public func reachable(_ audience: Audience, _ txn: borrowing Transaction) throws -> Bitmap {
        guard !audience.devices.isEmpty else { return Bitmap() }
        let live = Bitmap.union([try liveDevices(audience.projectID, .ios, txn),
                                 try liveDevices(audience.projectID, .android, txn)])
        return audience.devices.intersection(live)
    }

    /// Calls `body` for each reachable device of `reachable` with an ordinal of
    /// at least `from`, ascending, with its fields borrowed (no copies), until
    /// `body` returns false. The records are the snapshot's: from the recipient
    /// cache where it holds them as of this snapshot, else from the device
    /// table, walked in key order.
    public func forEachRecipient(projectID pid: UInt32, in reachable: Bitmap, from: UInt32 = 0, _ txn: borrowing Transaction,
                                 _ body: (_ ordinal: UInt32, _ platform: Platform, _ deviceID: UnsafeRawBufferPointer,
                                          _ token: UnsafeRawBufferPointer) throws -> Bool) throws {
        // The snapshot's sequence, which decides what the cache may answer (only asked when there is one).
        let asOf = recipientCache == nil ? 0 : try appliedSequence(txn)
        var copied = RecipientCache.Batch()
        // Where names stored in fewer bytes are spelled out (the device_id's, then the token's).
        let scratch = UnsafeMutableRawPointer.allocate(byteCount: 2 * StoredName.longestSpelled, alignment: 8)
        defer { scratch.deallocate() }
        try txn.withCursor(tables.devices) { cursor in
            var walk = DeviceWalk(pid: pid)
            try reachable.forEachBatch(from: from, batchSize: 1024) { batch in
                let cached = recipientCache?.copy(pid, batch, asOf: asOf, into: &copied) ?? false
                return try copied.bytes.withUnsafeBytes { all in
                    for (i, ordinal) in batch.enumerated() {
                        let value: UnsafeRawBufferPointer
                        if cached, let held = copied.record(i, in: all) { value = held } else { value = try walk.record(ordinal, &cursor) }
                        guard let f = DeviceRecord.fields(of: value), let platform = Platform(rawValue: f.platform) else {
                            throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)", reason: "device record does not decode")
                        }
                        if !f.live { continue }  // reachable bitmaps come from the same snapshot; this guards hand-built ones
                        let id = f.deviceID.text(spellingInto: scratch)
                        let token = f.token.text(spellingInto: scratch + StoredName.longestSpelled)
                        if try !body(ordinal, platform, id, token) { return false }
                    }
                    return true
                }
            }
        }
    }

    /// One page of recipients starting at ordinal `from`; `next` resumes after it (nil at the end).
    public func recipients(projectID pid: UInt32, in reachable: Bitmap, from: UInt32, limit: Int,
                           _ txn: borrowing Transaction) throws -> (page: [Recipient], next: UInt32?) {
        var page: [Recipient] = []
        page.reserveCapacity(min(limit, 10_000))
        var next: UInt32? = nil
        try forEachRecipient(projectID: pid, in: reachable, from: from, txn) { ordinal, platform, id, token in
            if page.count == limit { next = ordinal; return false }
            page.append(Recipient(ordinal: ordinal, deviceID: String(decoding: id, as: UTF8.self),
                                  platform: platform, token: String(decoding: token, as: UTF8.self)))
            return true
        }
        return (page, next)
    }
}

/// Finds device records of one project by ascending ordinal with a cursor:
/// a short step forward where the next one is near, a seek otherwise.
private struct DeviceWalk {
    let pid: UInt32
    private var previous: UInt32?
    private var seekKey: (UInt32, UInt32)

    init(pid: UInt32) {
        self.pid = pid
        seekKey = (pid.bigEndian, 0)
    }

    /// The record of `ordinal`, which must be above the last one asked for.
    mutating func record(_ ordinal: UInt32, _ cursor: inout Cursor) throws -> UnsafeRawBufferPointer {
        var entry: Cursor.Entry?
        if let p = previous, ordinal > p, ordinal - p <= 8 {
            // A short gap (devices without a live token): stepping over a few
            // records is cheaper than a seek from the root of the tree.
            entry = try cursor.next()
            while let (k, _) = entry, k.count == 8, k.loadBigEndian(at: 0, as: UInt32.self) == pid,
                  k.loadBigEndian(at: 4, as: UInt32.self) < ordinal {
                entry = try cursor.next()
            }
        } else {
            seekKey.1 = ordinal.bigEndian
            entry = try withUnsafeBytes(of: &seekKey) { try cursor.seek(exactly: $0) }
        }
        previous = ordinal
        guard let (key, value) = entry, key.count == 8,
              key.loadBigEndian(at: 0, as: UInt32.self) == pid,
              key.loadBigEndian(at: 4, as: UInt32.self) == ordinal else {
            throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)", reason: "device in a bitmap is missing")
        }
        return value
    }
}
