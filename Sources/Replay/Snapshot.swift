import Foundation
import LMDB
import Projections
import SubscriptionLog
import TopicStore

/// The state of a store at its compaction horizon: the projections folded
/// through the horizon (an ordinary store directory, projections only) and the
/// hash-chain head there, recorded in `snapshot.json` beside the database:
///
/// ```
/// DIR/snapshots/<horizon>/data.mdb, lock.mdb, snapshot.json
/// {"format":1,"seq":2000000,"head":"3b5c…e1","ts":1767225600000,"createdAt":…}
/// ```
///
/// A compacted log starts at `horizon + 1`; its first record's chain link
/// extends `head`, so the chain stays verifiable across the horizon. Replay and
/// audit start from the snapshot whose horizon is the log's first sequence − 1.
public struct Snapshot: Sendable, Hashable {
    public static let folderName = "snapshots"
    public static let manifestName = "snapshot.json"

    /// The directory holding the snapshot's database and manifest.
    public var directory: String
    /// The horizon: the last sequence folded into the snapshot, and its chain link.
    public var head: ChainHead
    /// Time (ms since 1970) of the record at the horizon.
    public var timestamp: Int64
    /// When the snapshot was made (ms since 1970).
    public var createdAt: Int64

    public var sequence: UInt64 { head.sequence }

    public init(directory: String, head: ChainHead, timestamp: Int64, createdAt: Int64) {
        self.directory = directory
        self.head = head
        self.timestamp = timestamp
        self.createdAt = createdAt
    }

    /// `ROOT/snapshots`, where a store directory keeps its snapshots.
    public static func folder(inStore root: String) -> String {
        (root as NSString).appendingPathComponent(folderName)
    }

    /// `ROOT/snapshots/<horizon>`.
    public static func directory(inStore root: String, horizon: UInt64) -> String {
        (folder(inStore: root) as NSString).appendingPathComponent(String(horizon))
    }

    /// The snapshot at `horizon` in store directory `root`, or nil when there is none
    /// (an unfinished one, without its manifest, does not count).
    public static func find(inStore root: String, horizon: UInt64) throws -> Snapshot? {
        let dir = directory(inStore: root, horizon: horizon)
        let manifest = (dir as NSString).appendingPathComponent(manifestName)
        guard FileManager.default.fileExists(atPath: manifest) else { return nil }
        return try read(directory: dir)
    }

    /// Reads the manifest of the snapshot in `directory`.
    public static func read(directory: String) throws -> Snapshot {
        let path = (directory as NSString).appendingPathComponent(manifestName)
        guard let data = FileManager.default.contents(atPath: path),
              let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            throw ReplayError.badSnapshot(directory, "\(manifestName) is missing or not a JSON object")
        }
        guard (object["format"] as? NSNumber)?.intValue == 1 else {
            throw ReplayError.badSnapshot(directory, "unknown manifest format \(object["format"] ?? "none")")
        }
        guard let seq = (object["seq"] as? NSNumber)?.uint64Value,
              let hex = object["head"] as? String, let hash = ChainHash(hex: hex),
              let ts = (object["ts"] as? NSNumber)?.int64Value else {
            throw ReplayError.badSnapshot(directory, "the manifest needs seq, head (64 hex digits) and ts")
        }
        let created = (object["createdAt"] as? NSNumber)?.int64Value ?? 0
        return Snapshot(directory: directory, head: ChainHead(sequence: seq, hash: hash), timestamp: ts, createdAt: created)
    }

    /// The manifest's JSON text.
    var manifestJSON: String {
        "{\"format\":1,\"seq\":\(head.sequence),\"head\":\"\(head.hash.hex)\",\"ts\":\(timestamp),\"createdAt\":\(createdAt)}\n"
    }

    /// Writes the manifest and syncs it (the snapshot counts only once it is there).
    public func writeManifest() throws {
        let path = (directory as NSString).appendingPathComponent(Self.manifestName)
        try Durable.write(Array(manifestJSON.utf8), to: path)
    }

    /// Every finished snapshot horizon in store directory `root`, ascending.
    public static func horizons(inStore root: String) -> [UInt64] {
        let folder = folder(inStore: root)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return names.compactMap(UInt64.init).filter {
            FileManager.default.fileExists(atPath: (directory(inStore: root, horizon: $0) as NSString).appendingPathComponent(manifestName))
        }.sorted()
    }

    /// Copies the snapshot's database into `target` (an existing empty directory)
    /// with LMDB's compacting copy; the copy's projections are those at the horizon.
    func copyDatabase(to target: String) throws {
        try openDatabase().copy(to: target, compact: true)
    }

    /// Runs `body` in a read transaction over the snapshot's projections (what
    /// `history` starts from on a compacted log).
    func read<R>(_ body: (ProjectionReader, borrowing Transaction) throws -> R) throws -> R {
        let environment = try openDatabase()
        let reader = ProjectionReader(tables: try ProjectionTables.open(in: environment, create: false))
        return try environment.read { txn in try body(reader, txn) }
    }

    /// The snapshot's database, opened read-only.
    private func openDatabase() throws -> Environment {
        var options = Environment.Options()
        options.readOnly = true
        options.maxDatabases = 32
        return try Environment(path: directory, options: options)
    }

    /// Copies the whole snapshot (database and manifest) to `target`, which must not exist.
    func copy(toDirectory target: String) throws {
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        try copyDatabase(to: target)
        var copy = self
        copy.directory = target
        try copy.writeManifest()
    }
}

/// Small helpers for files that must survive a crash whole or not at all.
public enum Durable {
    /// Writes `bytes` to `path` through a temporary file, fsyncs it, renames it
    /// into place and fsyncs the directory.
    public static func write(_ bytes: [UInt8], to path: String) throws {
        let tmp = path + ".tmp-\(getpid())"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw ReplayError.io("cannot create \(tmp): \(String(cString: strerror(errno)))") }
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Foundation.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 {
                if errno == EINTR { continue }
                let e = String(cString: strerror(errno)); close(fd)
                throw ReplayError.io("cannot write \(tmp): \(e)")
            }
            offset += n
        }
        guard fsync(fd) == 0 else { let e = String(cString: strerror(errno)); close(fd); throw ReplayError.io("fsync \(tmp): \(e)") }
        close(fd)
        guard rename(tmp, path) == 0 else { throw ReplayError.io("cannot rename \(tmp): \(String(cString: strerror(errno)))") }
        try syncDirectory((path as NSString).deletingLastPathComponent)
    }

    /// fsyncs a directory, so renames and new names in it are durable.
    public static func syncDirectory(_ path: String) throws {
        let fd = open(path.isEmpty ? "." : path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw ReplayError.io("cannot open directory \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw ReplayError.io("fsync of directory \(path): \(String(cString: strerror(errno)))") }
    }

    /// fsyncs a file.
    public static func syncFile(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ReplayError.io("cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw ReplayError.io("fsync \(path): \(String(cString: strerror(errno)))") }
    }
}
