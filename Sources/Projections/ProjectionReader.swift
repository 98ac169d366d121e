import LMDB
import Roaring
import SubscriptionLog

/// A project's topic with its subscriber count.
public struct TopicInfo: Sendable, Hashable {
    public var id: UInt32
    public var record: TopicRecord
}

/// A page of a project's topics in code order (`ProjectionReader.topicPage`).
public struct TopicPage: Sendable, Hashable {
    public var topics: [TopicInfo]
    /// The last code of this page when more topics follow (the next page's `after`).
    public var next: String?

    public init(topics: [TopicInfo], next: String?) {
        self.topics = topics
        self.next = next
    }
}

/// One device as a send service or an operator sees it.
public struct DeviceInfo: Sendable, Hashable {
    public var ordinal: UInt32
    public var record: DeviceRecord
    public var topics: [String]
}

/// Read-only questions asked of the projections inside one transaction.
public struct ProjectionReader: Sendable {
    public let tables: ProjectionTables
    /// The serving process's copy of the device records, which
    /// `forEachRecipient` reads where it holds the snapshot's records.
    public let recipientCache: RecipientCache?
    /// The serving process's directory of topics, which audiences read where
    /// it holds the snapshot's topics.
    public let topicCache: TopicCache?
    /// The facts of the newest snapshot read through this store's file (see `SnapshotFacts`).
    public let snapshotFacts: SnapshotFacts?
    public init(tables: ProjectionTables, recipientCache: RecipientCache? = nil, topicCache: TopicCache? = nil,
                snapshotFacts: SnapshotFacts? = nil) {
        self.tables = tables
        self.recipientCache = recipientCache
        self.topicCache = topicCache
        self.snapshotFacts = snapshotFacts
    }

    /// The log sequence the snapshot of `txn` reflects.
    public func appliedSequence(_ txn: borrowing Transaction) throws -> UInt64 {
        if let held = snapshotFacts?.appliedSequence(txn) { return held }
        let sequence = try tables.appliedSequence(txn)
        snapshotFacts?.setAppliedSequence(sequence, txn)
        return sequence
    }

    public func project(named name: String, _ txn: borrowing Transaction) throws -> ProjectRecord? {
        if let held = snapshotFacts?.project(name, txn) { return held }
        // The name read in place: an array for the key cost an allocation per query.
        guard let v = try name.withUTF8Bytes({ try txn.get(tables.projects, $0) }) else { return nil }
        let record = try ProjectRecord(decoding: v, at: "projects/\(name)")
        try tables.checkProjectID(record, named: name, txn)  // the one field a reader uses
        snapshotFacts?.setProject(name, record, txn)
        topicCache?.noteProject(name, id: record.id)
        return record
    }

    /// Every project with its record, by name. `checked`: each record is checked
    /// (`ProjectionTables.checkProject`); an audit describing differences reads them as stored.
    public func projects(_ txn: borrowing Transaction, checked: Bool = true) throws -> [(name: String, record: ProjectRecord)] {
        var result: [(String, ProjectRecord)] = []
        try txn.withCursor(tables.projects) { cursor in
            var entry = try cursor.first()
            while let (key, value) = entry {
                let name = String(decoding: key, as: UTF8.self)
                result.append((name, try ProjectRecord(decoding: value, at: "projects/\(name)")))
                entry = try cursor.next()
            }
        }
        if checked { for (name, record) in result { try tables.checkProject(record, named: name, txn) } }
        return result
    }

    /// The id of the topic with `code`. The key is looked up in the form
    /// of schema 11 first (no key of that form is one of the older form), and
    /// only when it is not found is the table's order read: in the older form
    /// of a store not opened for writing since, the code is looked up again.
    public func topicID(_ pid: UInt32, code: String, _ txn: borrowing Transaction) throws -> UInt32? {
        var found = try Keys.withCode(pid, code, .byLength) { try txn.get(tables.topicCodes, $0) } ?? nil
        if found == nil, try tables.topicCodeOrder(txn) == .bytewise {
            found = try Keys.withCode(pid, code, .bytewise) { try txn.get(tables.topicCodes, $0) } ?? nil
        }
        guard let v = found else { return nil }
        guard v.count == 4 else { throw ProjectionCorruption(place: "topic_codes/\(pid)/\(code)", reason: "\(v.count) bytes") }
        return v.loadBigEndian(at: 0, as: UInt32.self)
    }

    /// Topic `tid` with its subscriber count and every slice it occupies.
    public func topic(_ pid: UInt32, _ tid: UInt32, _ txn: borrowing Transaction) throws -> TopicRecord? {
        guard var record = try storedTopic(pid, tid, txn) else { return nil }
        if PostingChunk.leavesNewestOut(tid) {
            record.slices = try PostingChunk.withNewest(record.slices, pid: pid, topic: tid, top: top(pid, txn), tables: tables, txn)
        }
        if try tables.topicLayout(txn) == .compact { try count(&record, pid, tid, txn) }
        return record
    }

    /// Topic `tid` as stored (in the compact layout, without its subscriber
    /// count, and for a shared topic without the project's newest slice: see
    /// `PostingChunk.omitsNewest`).
    public func storedTopic(_ pid: UInt32, _ tid: UInt32, _ txn: borrowing Transaction) throws -> TopicRecord? {
        guard let v = try txn.get(tables.topics, Keys.pair(pid, tid)) else { return nil }
        return try TopicRecord(decoding: v, at: "topics/\(pid)/\(tid)")
    }

    /// The project's newest slice with any chunk, which a shared topic's record does not list.
    private func top(_ pid: UInt32, _ txn: borrowing Transaction) throws -> UInt16? {
        try PostingChunk.maxHigh(pid: pid, tables: tables, txn)
    }

    /// Fills in the subscriber count of a compact layout's record (whose slices
    /// are all those it occupies, the newest included): its chunks' cardinalities.
    private func count(_ record: inout TopicRecord, _ pid: UInt32, _ tid: UInt32, _ txn: borrowing Transaction) throws {
        record.subscribers = try PostingChunk.cardinality(pid: pid, topic: tid, slices: record.slices, tables: tables, txn)
    }

    /// How many topics a project has (a walk of their keys: no record decoded, nothing counted).
    public func topicCount(_ pid: UInt32, _ txn: borrowing Transaction) throws -> Int {
        let prefix = Keys.project(pid)
        var n = 0
        try txn.withCursor(tables.topics) { cursor in
            var entry = try cursor.seek(atLeast: prefix)
            while let (key, _) = entry, Keys.hasPrefix(key, prefix) {
                n += 1
                entry = try cursor.next()
            }
        }
        return n
    }

    /// One page of a project's topics in code order (byte order: codes are ASCII): those whose
    /// code starts with `prefix`, after the code `after` (exclusive), at most `limit`, each with
    /// its subscriber count. `next` is the page's last code when more follow: pass it as `after`.
    public func topicPage(_ pid: UInt32, prefix: String = "", after: String? = nil, limit: Int,
                          _ txn: borrowing Transaction) throws -> TopicPage {
        precondition(limit > 0)
        // One code more than the page, to tell whether more follow.
        let wanted = limit < Int.max ? limit + 1 : limit
        let codes = try tables.topicCodeOrder(txn) == .byLength
            ? try codesByLength(pid, prefix: Array(prefix.utf8), after: after.map { Array($0.utf8) }, limit: wanted, txn)
            : try codesBytewise(pid, prefix: Array(prefix.utf8), after: after.map { Array($0.utf8) }, limit: wanted, txn)
        let compact = try tables.topicLayout(txn) == .compact
        let top = try top(pid, txn)
        var page = TopicPage(topics: [], next: nil)
        for (code, tid) in codes.prefix(limit) {
            guard var record = try storedTopic(pid, tid, txn) else {
                throw ProjectionCorruption(place: "topic_codes/\(pid)/\(code)", reason: "names topic \(tid), which has no record")
            }
            record.slices = try PostingChunk.withNewest(record.slices, pid: pid, topic: tid, top: top, tables: tables, txn)
            if compact { try count(&record, pid, tid, txn) }
            page.topics.append(TopicInfo(id: tid, record: record))
        }
        if codes.count > limit { page.next = page.topics.last?.record.code }
        return page
    }

    /// Up to `limit` codes of project `pid` starting with `prefix`, after `after`, in code
    /// order, with their topic ids, from a table in the form of schema 11: one range of
    /// codes a length, the ranges merged. A length with no such code costs one seek.
    private func codesByLength(_ pid: UInt32, prefix: [UInt8], after: [UInt8]?, limit: Int,
                               _ txn: borrowing Transaction) throws -> [(code: String, tid: UInt32)] {
        var ranges: [[(code: [UInt8], tid: UInt32)]] = []
        try txn.withCursor(tables.topicCodes) { cursor in
            var length = max(prefix.count, 1)
            while length <= Keys.maxCodeKeyLength {
                // The codes of this length at or after `prefix` and above `after`: a code of
                // another length than `after`'s is above it when its bytes are at or above
                // `after`'s (the probe below); one of the same length when they differ.
                let head = Keys.project(pid) + [Keys.codeLengthByte(length)]
                var start = head + prefix
                if let after, (head + after).lexicographicallyPrecedes(start) == false { start = head + after }
                var entry = try cursor.seek(atLeast: start)
                var range: [(code: [UInt8], tid: UInt32)] = []
                while let (key, value) = entry, range.count < limit, key.count == 5 + length, Keys.hasPrefix(key, head) {
                    let code = UnsafeRawBufferPointer(rebasing: key[5...])
                    guard code.starts(with: prefix) else { break }
                    if let after, code.elementsEqual(after) { entry = try cursor.next(); continue }
                    guard value.count == 4 else {
                        throw ProjectionCorruption(place: "topic_codes/\(pid)/\(String(decoding: code, as: UTF8.self))", reason: "\(value.count) bytes")
                    }
                    range.append((Array(code), value.loadBigEndian(at: 0, as: UInt32.self)))
                    entry = try cursor.next()
                }
                if !range.isEmpty { ranges.append(range) }
                // On to the next length that has a code of this project (the key the seek found tells it).
                guard let (key, _) = entry, key.count >= 5, Keys.hasPrefix(key, Keys.project(pid)) else { break }
                let next = Int(key[4]) - 0x7F
                length = next > length ? next : length + 1
            }
        }
        var merged: [(code: String, tid: UInt32)] = []
        var heads = [Int](repeating: 0, count: ranges.count)
        while merged.count < limit {
            var best: Int? = nil
            for r in ranges.indices where heads[r] < ranges[r].count {
                if let b = best, !ranges[r][heads[r]].code.lexicographicallyPrecedes(ranges[b][heads[b]].code) { continue }
                best = r
            }
            guard let b = best else { break }
            let (code, tid) = ranges[b][heads[b]]
            merged.append((String(decoding: code, as: UTF8.self), tid))
            heads[b] += 1
        }
        return merged
    }

    /// `codesByLength` for a table in the form before schema 11, where a prefix is one range.
    private func codesBytewise(_ pid: UInt32, prefix: [UInt8], after: [UInt8]?, limit: Int,
                               _ txn: borrowing Transaction) throws -> [(code: String, tid: UInt32)] {
        let base = Keys.project(pid) + prefix
        var start = base
        // The smallest key above pid ‖ after: codes hold no NUL byte.
        if let after {
            let above = Keys.project(pid) + after + [0]
            if start.lexicographicallyPrecedes(above) { start = above }
        }
        var codes: [(code: String, tid: UInt32)] = []
        try txn.withCursor(tables.topicCodes) { cursor in
            var entry = try cursor.seek(atLeast: start)
            while let (key, value) = entry, codes.count < limit, Keys.hasPrefix(key, base) {
                let code = String(decoding: UnsafeRawBufferPointer(rebasing: key[4...]), as: UTF8.self)
                guard value.count == 4 else { throw ProjectionCorruption(place: "topic_codes/\(pid)/\(code)", reason: "\(value.count) bytes") }
                codes.append((code, value.loadBigEndian(at: 0, as: UInt32.self)))
                entry = try cursor.next()
            }
        }
        return codes
    }

    /// Every topic of a project, by topic id, each with every slice it
    /// occupies (the newest included); with `counted: false`, in the compact
    /// layout without subscriber counts (a topic without subscribers is one
    /// without slices either way).
    public func topics(_ pid: UInt32, _ txn: borrowing Transaction, counted: Bool = true) throws -> [TopicInfo] {
        var result: [TopicInfo] = []
        try forEachTopicRecord(pid, txn) { tid, value in
            result.append(TopicInfo(id: tid, record: try TopicRecord(decoding: value, at: "topics/\(pid)/\(tid)")))
        }
        let top = try top(pid, txn)
        for i in result.indices {
            result[i].record.slices = try PostingChunk.withNewest(result[i].record.slices, pid: pid, topic: result[i].id,
                                                                  top: top, tables: tables, txn)
        }
        if counted, try tables.topicLayout(txn) == .compact {
            for i in result.indices { try count(&result[i].record, pid, result[i].id, txn) }
        }
        return result
    }

    /// The ordinal of `deviceID` in this snapshot. No table is keyed by
    /// device_id (see `ProjectionTables`): the serving process asks its
    /// recipient cache's index, and confirms the candidates here; any other
    /// reader walks the project's device records, which takes about 0.2 s
    /// per million devices.
    public func ordinal(_ pid: UInt32, deviceID: String, _ txn: borrowing Transaction) throws -> UInt32? {
        var id = deviceID
        return try id.withUTF8 { idBytes -> UInt32? in
            let id = UnsafeRawBufferPointer(idBytes)
            if let cache = recipientCache,
               let candidates = cache.deviceCandidates(pid, id, asOf: try appliedSequence(txn)) {
                for ordinal in candidates {
                    guard let v = try txn.get(tables.devices, Keys.pair(pid, ordinal)) else { continue }
                    guard let f = DeviceRecord.fields(of: v) else {
                        throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)", reason: "device record does not decode")
                    }
                    if f.has(deviceID: id) { return ordinal }
                }
                return nil
            }
            var found: UInt32?
            try forEachDevice(pid, txn) { ordinal, f in
                guard f.has(deviceID: id) else { return true }
                found = ordinal
                return false
            }
            return found
        }
    }

    /// The ordinals of those of `deviceIDs` that project `pid` has, found in one walk of its device records.
    public func ordinals(_ pid: UInt32, deviceIDs: Set<String>, _ txn: borrowing Transaction) throws -> [String: UInt32] {
        var found: [String: UInt32] = [:]
        guard !deviceIDs.isEmpty else { return found }
        try forEachDevice(pid, txn) { ordinal, f in
            let id = f.deviceID.string
            if deviceIDs.contains(id) { found[id] = ordinal }
            return found.count < deviceIDs.count
        }
        return found
    }

    /// Calls `body` with each device record of project `pid` from ordinal `first` on,
    /// in ordinal order, read in place, until it returns false.
    private func forEachDevice(_ pid: UInt32, from first: UInt32 = 0, _ txn: borrowing Transaction,
                               _ body: (UInt32, DeviceRecord.Fields) throws -> Bool) throws {
        let prefix = Keys.project(pid)
        try txn.withCursor(tables.devices) { cursor in
            var entry = try cursor.seek(atLeast: Keys.pair(pid, first))
            while let (key, value) = entry, Keys.hasPrefix(key, prefix) {
                guard key.count == 8 else { throw ProjectionCorruption(place: "devices/\(pid)", reason: "key of \(key.count) bytes") }
                let ordinal = key.loadBigEndian(at: 4, as: UInt32.self)
                guard let f = DeviceRecord.fields(of: value) else {
                    throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)", reason: "device record does not decode")
                }
                guard try body(ordinal, f) else { return }
                entry = try cursor.next()
            }
        }
    }

    /// The codes of the project's topics that have no subscriber and whose last
    /// change is at or before `horizon` (what garbage collection drops), in one walk
    /// of the topic records read in place: no record of any other topic is decoded.
    public func idleTopicCodes(_ pid: UInt32, changedAtOrBefore horizon: UInt64, _ txn: borrowing Transaction) throws -> [String] {
        let top = try top(pid, txn)
        var codes: [String] = []
        try forEachTopicRecord(pid, txn) { tid, value in
            guard let f = TopicRecord.fields(of: value) else {
                throw ProjectionCorruption(place: "topics/\(pid)/\(tid)", reason: "topic record does not decode (\(value.count) bytes)")
            }
            // No slice listed, and none in the project's newest slice, which a shared topic's record leaves out.
            if f.slices.count == 0, f.lastChangeSeq <= horizon,
               try PostingChunk.withNewest([], pid: pid, topic: tid, top: top, tables: tables, txn).isEmpty {
                codes.append(String(decoding: f.code, as: UTF8.self))
            }
        }
        return codes
    }

    /// Calls `body` with the id and the stored bytes of each topic record of project `pid`, in id order.
    private func forEachTopicRecord(_ pid: UInt32, _ txn: borrowing Transaction,
                                    _ body: (UInt32, UnsafeRawBufferPointer) throws -> Void) throws {
        let prefix = Keys.project(pid)
        try txn.withCursor(tables.topics) { cursor in
            var entry = try cursor.seek(atLeast: prefix)
            while let (key, value) = entry, Keys.hasPrefix(key, prefix) {
                guard key.count == 8 else { throw ProjectionCorruption(place: "topics/\(pid)", reason: "key of \(key.count) bytes") }
                try body(key.loadBigEndian(at: 4, as: UInt32.self), value)
                entry = try cursor.next()
            }
        }
    }

    /// Calls `body` with the ordinal, whether it holds a token (live or rejected)
    /// and when that token was rejected, of each of the project's devices whose
    /// ordinal is in `ordinals`, in order: their records read in place, no name
    /// spelled (`deviceRecord` decodes one).
    public func forEachDeviceState(_ pid: UInt32, ordinals: Range<UInt32>, _ txn: borrowing Transaction,
                                   _ body: (_ ordinal: UInt32, _ hasToken: Bool, _ rejectedAt: Int64?) throws -> Void) throws {
        guard !ordinals.isEmpty else { return }
        try forEachDevice(pid, from: ordinals.lowerBound, txn) { ordinal, f in
            guard ordinal < ordinals.upperBound else { return false }
            try body(ordinal, f.hasToken, f.rejectedAt)
            return true
        }
    }

    public func deviceRecord(_ pid: UInt32, ordinal: UInt32, _ txn: borrowing Transaction) throws -> DeviceRecord? {
        guard let v = try txn.get(tables.devices, Keys.pair(pid, ordinal)) else { return nil }
        return try DeviceRecord(decoding: v, at: "devices/\(pid)/\(ordinal)")
    }

    /// A device with its token, platform, state and topic codes.
    public func device(_ pid: UInt32, deviceID: String, _ txn: borrowing Transaction) throws -> DeviceInfo? {
        guard let ordinal = try ordinal(pid, deviceID: deviceID, txn) else { return nil }
        return try device(pid, ordinal: ordinal, txn)
    }

    /// Device `ordinal` with its token, platform, state and topic codes.
    public func device(_ pid: UInt32, ordinal: UInt32, _ txn: borrowing Transaction) throws -> DeviceInfo? {
        guard let record = try deviceRecord(pid, ordinal: ordinal, txn) else { return nil }
        var codes: [String] = []
        for tid in try Self.memberships(pid, ordinal, tables: tables, txn) {
            guard let t = try storedTopic(pid, tid, txn) else {
                throw ProjectionCorruption(place: "device_topics/\(pid)/\(ordinal)/\(tid)", reason: "membership of a missing topic")
            }
            codes.append(t.code)
        }
        return DeviceInfo(ordinal: ordinal, record: record, topics: codes)
    }

    static func memberships(_ pid: UInt32, _ ordinal: UInt32, tables: ProjectionTables, _ txn: borrowing Transaction) throws -> [UInt32] {
        guard let v = try txn.get(tables.deviceTopics, Keys.pair(pid, ordinal)) else { return [] }
        guard let list = DeviceTopics.decode(v) else {
            throw ProjectionCorruption(place: "device_topics/\(pid)/\(ordinal)", reason: "\(v.count) bytes is not an ascending topic id list")
        }
        return list
    }

    /// The bitmap of device ordinals subscribed to topic `tid`: one read per
    /// slice the topic occupies (built-in sets probe every slice of the project).
    public func bitmap(_ pid: UInt32, topic tid: UInt32, _ txn: borrowing Transaction) throws -> Bitmap {
        guard tid >= ProjectionTables.firstTopicID else { return try PostingChunk.read(pid: pid, topic: tid, tables: tables, txn) }
        guard let slices = try slices(pid, tid, txn) else { return Bitmap() }
        return try PostingChunk.read(pid: pid, topic: tid, slices: slices, required: true, tables: tables, txn)
    }

    /// The slices topic `tid` occupies: those its record lists, read in place,
    /// and the project's newest when the record leaves it out; nil when it has no record.
    func slices(_ pid: UInt32, _ tid: UInt32, _ txn: borrowing Transaction) throws -> [UInt16]? {
        guard let stored = try Keys.withPair(pid, tid, { try txn.get(tables.topics, $0) }) else { return nil }
        let listed: [UInt16]
        if let slices = TopicRecord.storedSlices(of: stored) {
            listed = Array(slices)
        } else {
            // Not a well-formed record: the full decode says what is wrong.
            listed = try TopicRecord(decoding: stored, at: "topics/\(pid)/\(tid)").slices
        }
        guard PostingChunk.leavesNewestOut(tid) else { return listed }
        return try PostingChunk.withNewest(listed, pid: pid, topic: tid, top: top(pid, txn), tables: tables, txn)
    }

    /// Devices with a live token on `platform`.
    public func liveDevices(_ pid: UInt32, _ platform: Platform, _ txn: borrowing Transaction) throws -> Bitmap {
        try bitmap(pid, topic: ProjectionTables.BuiltIn.live(platform), txn)
    }

    /// Every device the project knows.
    public func knownDevices(_ pid: UInt32, _ txn: borrowing Transaction) throws -> Bitmap {
        try bitmap(pid, topic: ProjectionTables.BuiltIn.knownDevices, txn)
    }
}
