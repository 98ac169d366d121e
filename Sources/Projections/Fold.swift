import LMDB
import SubscriptionLog

/// The one fold from log records to projections: the live write path and
/// replay both call `apply`, so the rule exists exactly once.
public enum Fold {
    /// Applies `record` (which must be the next sequence) to the projections.
    public static func apply(_ record: LogRecord, to writer: ProjectionWriter, _ txn: borrowing Transaction) throws {
        let (sequence, timestamp) = (record.sequence, record.timestamp)
        try record.event.body.withTexts { body in
            try apply(sequence: sequence, timestamp: timestamp, project: record.event.project, body, to: writer, txn)
        }
    }

    /// `apply(_:to:_:)` of a record a rebuild's log reader decoded, its names' text in the reader's `NameArena`.
    public static func apply(_ record: borrowing FoldRecord, to writer: ProjectionWriter, _ txn: borrowing Transaction) throws {
        try apply(sequence: record.sequence, timestamp: record.timestamp, project: record.project, record.body, to: writer, txn)
    }

    /// `apply(_:to:_:)` with the record's parts handed over one by one, each
    /// borrowed. Switching over `record.event.body` with the whole record
    /// borrowed, the compiler copied the body's payload in several cases (a
    /// retain and a release of each of its strings and arrays); over a body
    /// borrowed as a parameter of its own it does not (callgrind, a rebuild of
    /// a 100k-device bench store: the fold's retains of strings from 1.76 M
    /// to 1.28 M). Not inlined, so that it stays a function of its own parameters.
    @inline(never)
    private static func apply(sequence: UInt64, timestamp: Int64, project projectName: borrowing String,
                              _ body: borrowing FoldBody, to writer: ProjectionWriter,
                              _ txn: borrowing Transaction) throws {
        try writer.advance(to: sequence)
        guard var project = try writer.project(named: projectName, create: true, txn) else { return }
        let pid = project.id

        switch body {
        case .token(let deviceID, let token, let platform):
            // A new device's record is written once, below, with its token.
            let (ordinal, created) = try deviceOrdinal(pid, deviceID, &project, writer, txn, writesRecord: false)
            // A token that moves here from another device is taken from it:
            // no duplicate deliveries after a reinstall.
            if let holder = try writer.ordinal(pid, token: token, txn), holder != ordinal {
                var previous = try writer.device(pid, holder, txn)
                if let p = previous.platform { try writer.setBit(pid, ProjectionTables.BuiltIn.live(p), holder, false, txn) }
                previous.token = nil
                previous.rejectedAt = nil
                writer.unindexToken(pid, token, ordinal: holder)
                try writer.put(device: previous, pid, holder, txn)
            }
            if created {
                // Nothing of its own to undo: the record is written from the
                // event's names where they are. A `DeviceRecord` holding them
                // retained and released both, on memory the log reader's thread
                // made (retains and releases are 8–10% of a rebuild's folding
                // thread, perf; this took 2.5% of its instructions, callgrind).
                writer.indexToken(pid, token, ordinal: ordinal)
                try writer.setBit(pid, ProjectionTables.BuiltIn.live(platform), ordinal, true, txn)
                try writer.putDevice(deviceID: deviceID, token: token, platform: platform, tokenTime: timestamp, pid, ordinal, txn)
                break
            }
            // The record takes the token, the platform and the time, and loses any rejection;
            // what it held before is undone: the old token's filing and its platform's live bit.
            let held = try writer.replaceToken(pid, ordinal, with: token, platform: platform, tokenTime: timestamp, txn)
            if case .other(let oldHash) = held.token {
                writer.unindexToken(pid, hash: oldHash, ordinal: ordinal)
            }
            if let p = held.platform, held.live, p != platform {
                try writer.setBit(pid, ProjectionTables.BuiltIn.live(p), ordinal, false, txn)
            }
            if held.token != .same { writer.indexToken(pid, token, ordinal: ordinal) }
            try writer.setBit(pid, ProjectionTables.BuiltIn.live(platform), ordinal, true, txn)

        case .register(let deviceID, let specs):
            let (ordinal, _) = try deviceOrdinal(pid, deviceID, &project, writer, txn)
            let member = try writer.membershipSlot(pid, ordinal, txn)
            writer.reserveTopics(member, specs.count)
            // Each spec and topic record is read where it is held: a copy of
            // either retained and released its strings, for every topic of a register.
            for i in specs.indices {
                // The topic's id is kept from its lookup or its creation: read back from its
                // slot's key it was a cache miss for a topic not subscribed to lately (perf).
                let slot: Int, tid: UInt32
                if let known = try writer.topicID(pid, code: specs[i].code, txn) {
                    guard let s = try writer.topicSlot(pid, known, txn) else {
                        throw ProjectionCorruption(place: "topics/\(pid)/\(known)", reason: "indexed topic \(specs[i].code) is missing")
                    }
                    (slot, tid) = (s, known)
                    if let title = specs[i].title, !writer.topic(at: slot, hasTitle: title) {
                        writer.modifyTopic(at: slot) { $0.title = title; $0.lastChangeSeq = sequence }
                    }
                    if let single = specs[i].single, single != writer.topicIsSingle(at: slot) {
                        writer.modifyTopic(at: slot) { $0.single = single; $0.lastChangeSeq = sequence }
                    }
                } else {
                    let spec = specs[i]
                    tid = try writer.newTopicID(single: spec.single ?? false, &project)
                    slot = try writer.createTopic(pid, tid, TopicRecord(
                        code: spec.code, title: spec.title ?? spec.code, single: spec.single ?? false,
                        subscribers: 0, createdSeq: sequence, lastChangeSeq: sequence), txn)
                }
                if try writer.subscribe(member, tid, txn) {
                    writer.addSubscriber(at: slot, sequence: sequence)
                }
            }

        case .unregister(let deviceID, let codes):
            guard let ordinal = try writer.ordinal(pid, deviceID: deviceID, txn) else { break }
            let member = try writer.membershipSlot(pid, ordinal, txn)
            for code in codes {
                guard let tid = try writer.topicID(pid, code: code, txn) else { continue }
                try unsubscribe(pid, member, tid, sequence, writer, txn)
            }

        case .unregisterAll(let deviceID):
            guard let ordinal = try writer.ordinal(pid, deviceID: deviceID, txn) else { break }
            let member = try writer.membershipSlot(pid, ordinal, txn)
            for tid in writer.topicIDs(at: member) {
                try unsubscribe(pid, member, tid, sequence, writer, txn)
            }

        case .forgetDevice(let deviceID):
            // Only an idle device is forgotten: one that got a token or a topic
            // after the collector looked is left alone (the rule is in the fold,
            // so replay decides exactly as the live store did).
            guard let ordinal = try writer.ordinal(pid, deviceID: deviceID, txn) else { break }
            let member = try writer.membershipSlot(pid, ordinal, txn)
            let device = try writer.device(pid, ordinal, txn)
            guard writer.topicIDs(at: member).isEmpty, device.state != .live else { break }
            if let token = device.token {  // a rejected token goes with it
                token.withUTF8Bytes { writer.unindexToken(pid, NameText($0), ordinal: ordinal) }
            }
            try writer.setBit(pid, ProjectionTables.BuiltIn.knownDevices, ordinal, false, txn)
            writer.unindexDevice(pid, deviceID, ordinal: ordinal)
            try writer.deleteDevice(pid, ordinal, txn)

        case .dropTopic(let code):
            // Only a topic without subscribers is dropped (see forgetDevice).
            guard let tid = try writer.topicID(pid, code: code, txn),
                  let slot = try writer.topicSlot(pid, tid, txn), writer.topic(at: slot).subscribers == 0 else { break }
            try writer.dropTopic(pid, tid, code: code, txn)

        case .expireToken(let token):
            guard let ordinal = try writer.ordinal(pid, token: token, txn) else { break }
            var device = try writer.device(pid, ordinal, txn)
            // Only a rejected token expires: a live one is never dropped.
            guard let held = device.token, token.equals(held), device.rejectedAt != nil else { break }
            device.token = nil
            device.rejectedAt = nil
            writer.unindexToken(pid, token, ordinal: ordinal)
            try writer.put(device: device, pid, ordinal, txn)

        case .tokenRejected(let token, let providerTime, _):
            guard let ordinal = try writer.ordinal(pid, token: token, txn) else { break }
            let device = try writer.tokenStanding(pid, ordinal, of: token, txn)
            // The provider's time, but never later than the store's when the rejection was logged: a
            // provider clock ahead of ours would otherwise date it after registrations that came later
            // (a review found the answer then depending on which of the two arrived first).
            let rejectedAt = min(providerTime, timestamp)
            // Never drop a token that was registered again after the rejection.
            guard device.holds, !device.rejected, device.tokenTime <= rejectedAt else { break }
            if let p = device.platform { try writer.setBit(pid, ProjectionTables.BuiltIn.live(p), ordinal, false, txn) }
            try writer.markRejected(pid, ordinal, at: rejectedAt, txn)
        }
        writer.update(project: projectName, project)
    }

    /// The ordinal of `deviceID`, allocating the next dense one for a new device
    /// (and writing its empty record unless the caller writes a full one).
    private static func deviceOrdinal(_ pid: UInt32, _ deviceID: NameText, _ project: inout ProjectRecord,
                                      _ writer: ProjectionWriter, _ txn: borrowing Transaction,
                                      writesRecord: Bool = true) throws -> (UInt32, Bool) {
        if let ordinal = try writer.ordinal(pid, deviceID: deviceID, txn) { return (ordinal, false) }
        let ordinal = project.nextOrdinal
        guard ordinal < UInt32.max else { throw ProjectionCorruption(place: "projects/\(pid)", reason: "device ordinals exhausted") }
        project.nextOrdinal += 1
        writer.indexDevice(pid, deviceID, ordinal: ordinal)
        // A new device has no topics: its empty list is cached now, so the
        // register that follows a token (in the same batch, as the SDKs send
        // them) does not look for the device's topics in the store.
        _ = writer.newMembershipSlot(pid, ordinal)
        if writesRecord { try writer.put(device: DeviceRecord(deviceID: deviceID.string), pid, ordinal, txn) }
        try writer.setBit(pid, ProjectionTables.BuiltIn.knownDevices, ordinal, true, txn)
        return (ordinal, true)
    }

    private static func unsubscribe(_ pid: UInt32, _ member: Int, _ tid: UInt32, _ seq: UInt64,
                                    _ writer: ProjectionWriter, _ txn: borrowing Transaction) throws {
        guard try writer.unsubscribe(member, tid, txn) else { return }
        guard let slot = try writer.topicSlot(pid, tid, txn) else {
            throw ProjectionCorruption(place: "topics/\(pid)/\(tid)", reason: "membership of a missing topic")
        }
        try writer.removeSubscriber(at: slot, sequence: seq, "topics/\(pid)/\(tid)")
    }
}
