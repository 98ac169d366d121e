import Foundation
import LMDB
@testable import Projections
import Roaring
import SubscriptionLog
import Testing
import TopicStore

/// A fresh directory under the system temp dir, removed when the value is released.
final class TemporaryDirectory: @unchecked Sendable {
    let path: String
    init(_ label: String = "topicstore") {
        path = NSTemporaryDirectory() + "\(label)-\(UUID().uuidString)"
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    func sub(_ name: String) -> String { path + "/" + name }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// Deterministic pseudo-random numbers (SplitMix64) so failures reproduce.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func int(_ n: Int) -> Int { Int(next() % UInt64(n)) }
    mutating func pick<T>(_ a: [T]) -> T { a[int(a.count)] }
}

/// Where the package's executables were built (beside the test bundle).
enum BuiltProducts {
    static var directory: URL {
        URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
    }
    static func executable(_ name: String) -> String {
        var dir = directory
        // The runner may be inside the .xctest bundle on some layouts.
        for _ in 0..<3 {
            let candidate = dir.appendingPathComponent(name).path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        return directory.appendingPathComponent(name).path
    }
}

/// Every projection table as key → value bytes, with postings decoded to their
/// ordinals (container encodings may legitimately differ between two folds).
struct ProjectionDump: Equatable, CustomStringConvertible {
    var tables: [String: [[UInt8]: [UInt8]]]

    static func of(_ store: TopicStore) throws -> ProjectionDump {
        let tables = store.tables
        return try store.read { txn in try of(tables, txn) }
    }

    static func of(_ tables: ProjectionTables, _ txn: borrowing Transaction) throws -> ProjectionDump {
        var result: [String: [[UInt8]: [UInt8]]] = [:]
        for db in tables.all {
            var entries: [[UInt8]: [UInt8]] = [:]
            try txn.withCursor(db) { cursor in
                var entry = try cursor.first()
                while let (k, v) = entry {
                    if db.name == "postings" {
                        let bitmap = try Bitmap(chunk: v, high: k.loadBigEndian(at: 4, as: UInt16.self))
                        entries[Array(k)] = bitmap.toArray().flatMap { withUnsafeBytes(of: $0.bigEndian, Array.init) }
                    } else {
                        entries[Array(k)] = Array(v)
                    }
                    entry = try cursor.next()
                }
            }
            result[db.name] = entries
        }
        return ProjectionDump(tables: result)
    }

    var description: String {
        tables.keys.sorted().map { "\($0): \(tables[$0]!.count) entries" }.joined(separator: ", ")
    }

    /// The first few differences, for failure messages.
    func differences(from other: ProjectionDump) -> [String] {
        var out: [String] = []
        for name in Set(tables.keys).union(other.tables.keys).sorted() {
            let a = tables[name] ?? [:], b = other.tables[name] ?? [:]
            for key in Set(a.keys).union(b.keys) where a[key] != b[key] {
                out.append("\(name) key \(key): \(a[key].map { "\($0)" } ?? "missing") vs \(b[key].map { "\($0)" } ?? "missing")")
                if out.count >= 10 { return out }
            }
        }
        return out
    }
}

/// Folds the log of `store` into fresh projections in `directory` and dumps them.
func foldLog(of store: TopicStore, into directory: String) throws -> ProjectionDump {
    let target = try TopicStore(directory: directory)
    defer { target.close() }
    let log = store.log
    var records: [LogRecord] = []
    try store.read { txn in try log.forEach(txn) { records.append($0); return true } }
    let writer = ProjectionWriter(tables: target.tables)
    try target.environment.write { txn in
        try writer.begin(txn)
        for r in records { try Fold.apply(r, to: writer, txn) }
        try writer.flush(txn)
    }
    return try ProjectionDump.of(target)
}

/// Suites that run the `topicstore` executable as an operator would: real
/// processes, standard input given, both outputs and the exit status kept.
protocol RunsTopicstore {}

struct TopicstoreRun {
    var status: Int32
    var stdout: String
    var stderr: String
}

extension RunsTopicstore {
    typealias Run = TopicstoreRun

    /// A store in `dir/data` made by `topicstore load` of `commands`; its path.
    func loadedStore(_ dir: TemporaryDirectory, _ commands: String) throws -> String {
        let load = try topicstore(["load", "--data", dir.sub("data"), "-"], stdin: commands)
        #expect(load.status == 0, "\(load.stderr)")
        return dir.sub("data")
    }

    @discardableResult
    func topicstore(_ arguments: [String], stdin: String? = nil) throws -> Run {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: BuiltProducts.executable("topicstore"))
        process.arguments = arguments
        let out = Pipe(), err = Pipe(), input = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        // A command may stop reading early (load stops when the store fails): its standard
        // input is written beside the reads, and a closed pipe is an error here, not a SIGPIPE.
        signal(SIGPIPE, SIG_IGN)
        try process.run()
        let writer = input.fileHandleForWriting
        let wrote = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            if let stdin { try? writer.write(contentsOf: Data(stdin.utf8)) }
            try? writer.close()
            wrote.signal()
        }
        let o = out.fileHandleForReading.readDataToEndOfFile()
        let e = err.fileHandleForReading.readDataToEndOfFile()
        wrote.wait()
        process.waitUntilExit()
        // Killed by a signal: 128 + its number, as a shell says it (SIGILL is 4, which is also "verification failed").
        let status = process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
        return Run(status: status, stdout: String(decoding: o, as: UTF8.self), stderr: String(decoding: e, as: UTF8.self))
    }
}

/// Makes `store` look as an older version left it: every value of `table`
/// replaced by what `older` makes of it, topic codes keyed as before schema
/// 11 (when `schema` is older), and the schema stamped `schema`.
/// Before schema 6, shared topic records listed their project's newest slice
/// too: it is put back first. Returns how many values were rewritten.
@discardableResult
func rewriteAsOlderSchema(_ store: TopicStore, _ table: Database, schema: UInt8,
                          _ older: (UnsafeRawBufferPointer) throws -> [UInt8]) throws -> Int {
    try rewriteAsOlderSchema(store, table, schema: schema) { _, v in try older(v) }
}

/// `rewriteAsOlderSchema`, where the older form depends on the key too (a
/// portable posting chunk names its slice, which is in the key).
@discardableResult
func rewriteAsOlderSchema(_ store: TopicStore, _ table: Database, schema: UInt8,
                          _ older: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> [UInt8]) throws -> Int {
    if schema < 6 { try listNewestSlices(store) }
    return try store.environment.write { txn in
        var rewritten: [([UInt8], [UInt8])] = []
        try txn.withCursor(table) { cursor in
            var entry = try cursor.first()
            while let (k, v) = entry {
                rewritten.append((Array(k), try older(k, v)))
                entry = try cursor.next()
            }
        }
        for (k, v) in rewritten { try txn.put(table, k, v) }
        // Before schema 11, topic codes were keyed pid ‖ code.
        if schema < 11 { try store.tables.reorderTopicCodes(.bytewise, txn) }
        try txn.put(store.tables.meta, Array("schemaVersion".utf8), [0, 0, 0, schema])
        return rewritten.count
    }
}

/// Writes each shared topic record of `store` that leaves out its project's
/// newest slice (schema 6) with that slice listed, as schemas before 6 did.
/// Returns how many records it rewrote.
@discardableResult
func listNewestSlices(_ store: TopicStore) throws -> Int {
    try store.environment.write { txn in
        var newest: [(UInt32, UInt16)] = []
        try txn.withCursor(store.tables.projects) { cursor in
            var entry = try cursor.first()
            while let (_, v) = entry {
                let p = try ProjectRecord(decoding: v, at: "test")
                if let h = PostingChunk.newest(nextOrdinal: p.nextOrdinal) { newest.append((p.id, h)) }
                entry = try cursor.next()
            }
        }
        var rewritten: [([UInt8], [UInt8])] = []
        for (pid, h) in newest {
            try txn.withCursor(store.tables.topics) { cursor in
                var entry = try cursor.seek(atLeast: Keys.pair(pid, ProjectionTables.firstTopicID))
                while let (k, v) = entry, k.count == 8, k.loadBigEndian(at: 0, as: UInt32.self) == pid {
                    let tid = k.loadBigEndian(at: 4, as: UInt32.self)
                    if tid & ProjectionTables.singleTopicBit != 0 { break }
                    var record = try TopicRecord(decoding: v, at: "test")
                    if record.slices.last != h, try txn.get(store.tables.postings, Keys.chunk(pid, tid, h)) != nil {
                        record.slices.append(h)
                        rewritten.append((Array(k), record.encoded(storingCount: false)))
                    }
                    entry = try cursor.next()
                }
            }
        }
        for (k, v) in rewritten { try txn.put(store.tables.topics, k, v) }
        return rewritten.count
    }
}
