import Foundation
import LMDB
import Projections
import SubscriptionLog
import TopicStore

/// The free space a compaction needs, estimated before it writes anything,
/// and what the filesystems have.
///
/// What a run writes, phase by phase, and what of it stays until the end
/// (the original file stays until the switch):
///
/// | phase | writes | until |
/// |---|---|---|
/// | garbage | its events into the live file (`garbagePerEvent` each, at most) | for good |
/// | snapshot | the projections rebuilt (`snapshotUnpacked` × P), then packed (P) | packed: for good |
/// | archive | about `archivePerLogByte` × the log bytes removed | for good (its own directory) |
/// | copy | a packed copy of the live file without the log removed (N, below) | for good |
///
/// P is the bytes of the projection tables now; C the live file's pages in
/// use (`TopicStore.bytesInUse`). N bounds the packed copy: C less the log
/// table's pages, plus the records the log keeps laid out in full pages (each
/// counted by its size, from a walk of the kept records: a count-based share
/// underestimated it when the removed records were small and the kept ones
/// large), plus the garbage events, which land in the log too. Needed is the highest point of that
/// sum, plus a margin of `marginFixed` + `marginShare` of it for what
/// writers append meanwhile, the estimates' error and the filesystem's own
/// use. Available is what `statvfs` gives unprivileged users (`f_bavail`)
/// on the store's filesystem, plus the leftovers of an interrupted run the
/// compaction would remove first. An archive directory on another
/// filesystem is checked on its own.
public struct SpacePlan: Sendable, Hashable {
    public var copyBytes = 0
    /// At most what the new file generation takes (N above).
    public var newFileBytes = 0
    public var projectionBytes = 0
    public var logBytesRemoved = 0
    public var archiveBytes = 0
    public var garbageBytes = 0
    /// Needed in the store's filesystem (margin included), and free there.
    public var needed = 0
    public var available = 0
    /// The filesystem holding the store.
    public var storeFilesystem = ""
    /// When the archive directory is on another filesystem: needed and free there.
    public var archiveNeeded: Int?
    public var archiveAvailable: Int?
    public var archiveFilesystem: String?
    /// What a run with `--no-file` (garbage only) would need.
    public var neededGarbageOnly = 0

    public var fits: Bool { needed <= available && (archiveNeeded ?? 0) <= (archiveAvailable ?? Int.max) }

    static let garbagePerEvent = 1024
    /// Pages the new file holds beyond its tables' packed pages: the
    /// catch-up rounds and the retirement commit after the copy, each freeing
    /// the pages it rewrote (6 in a 20 MB store of 21,500 events). A live file
    /// written in random order used to hide them in its own slack; with
    /// compact chunks and topic lists (schema 10) a small store has less.
    static let newFilePages = 64
    static let snapshotUnpacked = 1.5
    static let archivePerLogByte = 0.5
    static let marginFixed = 16 << 20
    static let marginShare = 0.10

    static func margin(_ bytes: Int) -> Int { marginFixed + Int(Double(bytes) * marginShare) }

    /// The plan of a run on `store` that moves the horizon from `previous` to
    /// `horizon`, commits `garbageEvents`, writes a new file generation when
    /// `newFile`, and an archive into `archive` when given. `leftovers` are
    /// removed before anything is written (their bytes count as free).
    static func estimate(store: TopicStore, directory: String, previous: UInt64, horizon: UInt64, garbageEvents: Int,
                         newFile: Bool, archive: String?, leftovers: [String]) throws -> SpacePlan {
        var plan = SpacePlan()
        let log = store.log, tables = store.tables
        let removed = horizon > previous ? Int(horizon - previous) : 0
        let (logBytes, logEntries, projectionBytes, keptLogBytes, pageSize) = try store.read { txn -> (Int, Int, Int, Int, Int) in
            let l = try txn.statistics(log.database)
            var p = 0
            for db in tables.all { p += try txn.statistics(db).bytes }
            let kept = try packedBytes(of: log, from: removed > 0 ? horizon + 1 : 0, pageSize: l.pageSize, txn)
            // Records, not entries: a compacted log holds many in a block.
            let records = try log.sequenceRange(txn).map { Int($0.upperBound - $0.lowerBound + 1) } ?? 0
            return (l.bytes, records, p, kept, l.pageSize)
        }
        plan.copyBytes = try store.bytesInUse()
        plan.projectionBytes = projectionBytes
        plan.logBytesRemoved = logEntries > 0 ? Int(Double(logBytes) * Double(min(removed, logEntries)) / Double(logEntries)) : 0
        plan.garbageBytes = garbageEvents * garbagePerEvent
        plan.archiveBytes = archive != nil && removed > 0 ? Int(Double(plan.logBytesRemoved) * archivePerLogByte) : 0
        plan.newFileBytes = min(plan.copyBytes, max(0, plan.copyBytes - logBytes) + keptLogBytes)
            + newFilePages * pageSize + plan.garbageBytes

        let storeDevice = Filesystem.device(of: directory)
        let archiveDevice = archive.map { Filesystem.device(of: Filesystem.existingAncestor(of: $0)) }
        let archiveHere = archiveDevice == nil || archiveDevice == storeDevice

        // The highest point of what the run adds to the store's filesystem.
        var kept = plan.garbageBytes
        var peak = kept
        if newFile {
            if removed > 0 {
                peak = max(peak, kept + Int(Double(projectionBytes) * snapshotUnpacked))
                kept += projectionBytes
                if archiveHere { kept += plan.archiveBytes }
            }
            peak = max(peak, kept + plan.newFileBytes)
        }
        plan.needed = peak + margin(peak)
        plan.neededGarbageOnly = plan.garbageBytes + margin(plan.garbageBytes)

        var freed: [UInt64: Int] = [:]
        for path in leftovers { freed[Filesystem.device(of: path), default: 0] += Compactor.treeBytes(path) + Filesystem.fileBytes(path) }
        plan.storeFilesystem = directory
        plan.available = Filesystem.available(at: directory) + (freed[storeDevice] ?? 0)
        if let archive, !archiveHere, plan.archiveBytes > 0 {
            let at = Filesystem.existingAncestor(of: archive)
            plan.archiveFilesystem = at
            plan.archiveNeeded = plan.archiveBytes + margin(plan.archiveBytes)
            plan.archiveAvailable = Filesystem.available(at: at) + (freed[archiveDevice!] ?? 0)
        }
        return plan
    }

    /// The bytes the log's records from `from` on take when written in key order into full
    /// pages (a packed copy): each leaf holds page size − 16 bytes of nodes (key 8 + header 8 +
    /// value, 2-byte slot, even-aligned); a record too large for half a page goes to its own
    /// overflow pages. Plus a branch page per 64 leaves and one page of slack.
    static func packedBytes(of log: EventLog, from: UInt64, pageSize: Int, _ txn: borrowing Transaction) throws -> Int {
        let usable = pageSize - 16, nodeMax = usable / 2
        var leafBytes = 0, overflowPages = 0
        try log.forEachEncoded(from: from, txn) { _, bytes in
            let node = 8 + 8 + bytes.count
            if node > nodeMax {
                overflowPages += (bytes.count + 16 + pageSize - 1) / pageSize
                leafBytes += 8 + 8 + 8 + 2
            } else {
                leafBytes += (node + 1) / 2 * 2 + 2
            }
            return true
        }
        let leaves = (leafBytes + usable - 1) / usable
        return (leaves + leaves / 64 + 1 + overflowPages) * pageSize
    }

    /// Why the run does not fit, and what to do (nil when it fits).
    func refusal(directory: String, newFile: Bool) -> String? {
        guard !fits else { return nil }
        let b = CompactionReportFormat.bytes
        var parts: [String] = []
        if needed > available {
            var what: [String] = []
            if garbageBytes > 0 { what.append("garbage events \(b(garbageBytes))") }
            if newFile && logBytesRemoved > 0 {
                what.append("snapshot \(b(projectionBytes)) (\(b(Int(Double(projectionBytes) * Self.snapshotUnpacked))) while it is packed)")
                if archiveBytes > 0 && archiveNeeded == nil { what.append("archive about \(b(archiveBytes))") }
                what.append("a copy of the file without the log removed, \(b(newFileBytes))")
            } else if newFile {
                what.append("a copy of the file, \(b(newFileBytes))")
            }
            what.append(what.isEmpty ? "a margin" : "and a margin")
            parts.append("it needs about \(b(needed)) free in the filesystem of \(directory) at its peak ("
                         + what.joined(separator: ", ") + "), and \(b(available)) is free")
        }
        if let need = archiveNeeded, let have = archiveAvailable, need > have, let fs = archiveFilesystem {
            parts.append("the archive needs about \(b(need)) free in the filesystem of \(fs), and \(b(have)) is free")
        }
        var advice = ["free space there"]
        if archiveBytes > 0 && archiveNeeded == nil { advice.append("write the archive to another filesystem (--archive DIR)") }
        if newFile && neededGarbageOnly <= available { advice.append("collect garbage only with --no-file (needs about \(b(neededGarbageOnly)))") }
        return "not enough free space to compact: " + parts.joined(separator: "; ")
            + ". Nothing of the store was changed. To compact, " + advice.joined(separator: ", or ") + "."
    }
}

/// Free space and filesystem identity, for `SpacePlan`.
enum Filesystem {
    /// Bytes unprivileged users may still write there (`f_bavail`). A filesystem that
    /// cannot be asked is taken to have room (the run then fails, and cleans up, as before).
    static func available(at path: String) -> Int {
        var s = statvfs()
        guard statvfs(path, &s) == 0 else { return Int.max / 4 }
        return Int(s.f_bavail) * Int(s.f_frsize)
    }

    /// The device a path (or its nearest existing ancestor) is on.
    static func device(of path: String) -> UInt64 {
        var st = stat()
        guard stat(existingAncestor(of: path), &st) == 0 else { return 0 }
        return UInt64(st.st_dev)
    }

    /// `path` if it exists, else its nearest existing ancestor (where a new directory would go).
    static func existingAncestor(of path: String) -> String {
        var p = (path as NSString).standardizingPath
        if !p.hasPrefix("/") { p = (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(p) }
        while !FileManager.default.fileExists(atPath: p), p != "/" { p = (p as NSString).deletingLastPathComponent }
        return p
    }

    /// The size of `path` when it is a regular file (0 otherwise).
    static func fileBytes(_ path: String) -> Int {
        var st = stat()
        guard lstat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return 0 }
        return Int(st.st_size)
    }
}
