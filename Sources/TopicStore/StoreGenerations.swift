import Foundation
#if canImport(Glibc)
import Glibc
#endif
import LMDB
import Projections
import SubscriptionLog
import Synchronization

/// Store generations, for file compaction.
///
/// A store directory either holds `data.mdb` itself (generation "") or a file
/// `CURRENT` naming a subdirectory (`g000001`, …) that holds it. Compaction
/// writes a compact copy into a new generation and switches CURRENT to it with
/// `TopicStore.retire(to:catchUp:)`; each generation has its own lock file, so
/// processes that still have the old one open are never confused by the new one.
extension TopicStore {
    public static let currentFileName = "CURRENT"

    /// The generation CURRENT names, or "" when there is no CURRENT.
    public static func activeGeneration(in directory: String) throws -> String {
        let path = directory + "/" + currentFileName
        guard FileManager.default.fileExists(atPath: path) else { return "" }
        let name = try String(contentsOfFile: path, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        guard isGenerationName(name) else {
            throw StoreError.notADatabase(path: directory, reason: "CURRENT names '\(name)', which is not a generation")
        }
        return name
    }

    /// Where generation `name` keeps its data.mdb.
    public static func generationDirectory(_ directory: String, _ name: String) -> String {
        name.isEmpty ? directory : directory + "/" + name
    }

    /// "g" and six or more digits.
    public static func isGenerationName(_ name: String) -> Bool {
        name.count >= 7 && name.first == "g" && name.dropFirst().allSatisfy(\.isASCII) && name.dropFirst().allSatisfy(\.isNumber)
    }

    /// The name for the generation after `name`.
    public static func nextGenerationName(after name: String) -> String {
        let n = (Int(name.dropFirst()) ?? 0) + 1
        let digits = String(n)
        return "g" + String(repeating: "0", count: max(0, 6 - digits.count)) + digits
    }

    /// Points CURRENT at `name`, atomically (write a private temporary file,
    /// fsync it, rename it over CURRENT, fsync the directory).
    static func setActiveGeneration(_ name: String, in directory: String) throws {
        let tmp = directory + "/.\(currentFileName).\(getpid()).\(UUID().uuidString).tmp"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw StoreError.notADatabase(path: directory, reason: "cannot write CURRENT: \(String(cString: strerror(errno)))") }
        let bytes = Array((name + "\n").utf8)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd)
        Glibc.close(fd)
        guard written == bytes.count, synced == 0, rename(tmp, directory + "/" + currentFileName) == 0 else {
            unlink(tmp)
            throw StoreError.notADatabase(path: directory, reason: "cannot replace CURRENT: \(String(cString: strerror(errno)))")
        }
        let dfd = open(directory, O_RDONLY | O_CLOEXEC)
        if dfd >= 0 { fsync(dfd); Glibc.close(dfd) }
    }
}

/// One generation's environment and its open tables.
final class Generation: Sendable {
    struct Retired: Error {}

    static let retiredKey = ProjectionTables.retiredToKey

    let name: String
    let directory: String
    let environment: Environment
    let log: EventLog
    let tables: ProjectionTables
    private let auxiliaryTables = Mutex<[String: Database]>([:])
    /// The writer thread's fold state, kept from batch to batch (its caches stay
    /// valid while no one else writes). Only the writer thread touches it.
    nonisolated(unsafe) let projectionWriter: ProjectionWriter
    /// The chain head the writer committed last in this file: a hint for the next batch,
    /// used only while the log still ends at it (see `TopicStore.chainToExtend`).
    let writerHead = Mutex<ChainHead?>(nil)
    var auxiliary: [String: Database] { auxiliaryTables.withLock { $0 } }
    /// What readers of this file read first, kept for its newest snapshot (see `SnapshotFacts`).
    let snapshotFacts = SnapshotFacts()
    /// The reader of this generation with its serving caches, made once: making
    /// one per query (copying the tables and caches in, destroying them after)
    /// was a sixth of a count of one per-user topic.
    let reader: ProjectionReader
    /// The newest read snapshot (LMDB transaction id) found not retired: a file once
    /// retired stays retired, so no older or equal snapshot needs looking again.
    private let currentThrough = Atomic<Int>(0)

    /// The environment in `directory`, LMDB's refusals told as a store's.
    static func openEnvironment(_ directory: String, _ options: Environment.Options) throws -> Environment {
        do {
            return try Environment(path: directory, options: options)
        } catch LMDBError.invalid {
            throw StoreError.notADatabase(path: directory, reason: "data.mdb is not an LMDB file")
        } catch LMDBError.versionMismatch {
            throw StoreError.notADatabase(path: directory, reason: "data.mdb was written by an incompatible LMDB")
        } catch LMDBError.alreadyOpen {
            throw StoreError.alreadyOpen(path: directory)
        } catch is EmptyDataFile {
            throw StoreError.notADatabase(path: directory,
                reason: "data.mdb is empty (0 bytes): a store cut to nothing, or never written; it is not read, nor made a new store")
        }
    }

    init(name: String, directory: String, options: TopicStore.Options, auxiliary: [String]) throws {
        self.name = name
        self.directory = directory
        var envOptions = Environment.Options()
        envOptions.mapSize = options.initialMapSize
        envOptions.readOnly = options.readOnly
        envOptions.noSync = options.durability == .noSync
        envOptions.maxDatabases = 32
        let env = try Self.openEnvironment(directory, envOptions)
        try env.checkReaders()
        // A file that holds a store must have all of its tables, and its schema version:
        // one missing is damage (its record in the table of tables, or the meta table),
        // never a reason to create a fresh one over the store (a writer would stamp a new
        // schema version, or start an empty `projects`, and take writes on top).
        if env.info().lastTransactionID > 0 { try Self.checkTables(env, directory: directory) }
        // A writer creates the tables of a new store, but never in someone else's
        // LMDB file: one that holds data and no log was not written by topicstore
        // (compaction would otherwise have folded it into a new generation and removed it).
        if !options.readOnly, env.info().lastTransactionID > 0, (try? EventLog.open(in: env, create: false)) == nil {
            throw Self.notAStore(env, directory, "data.mdb is an LMDB database that topicstore did not write (it has no log)")
        }
        environment = env
        do {
            (log, tables) = try Self.whileOpening(env) {
                (try EventLog.open(in: env, create: !options.readOnly), try ProjectionTables.open(in: env, create: !options.readOnly))
            }
        } catch LMDBError.notFound {
            throw Self.notAStore(env, directory, "it has no topicstore tables")
        }
        let tables = self.tables
        // The serving caches share one lock (`TopicCache.init(sharingLockWith:)`).
        let recipients = options.cachesRecipients && !options.readOnly ? RecipientCache() : nil
        projectionWriter = ProjectionWriter(tables: tables, recipientCache: recipients,
                                            topicCache: recipients.map { TopicCache(sharingLockWith: $0) },
                                            cacheEntries: options.writerCacheEntries)
        reader = ProjectionReader(tables: tables, recipientCache: projectionWriter.recipientCache,
                                  topicCache: projectionWriter.topicCache, snapshotFacts: snapshotFacts)
        let version = try Self.whileOpening(env) { try env.read { txn in try tables.storedSchemaVersion(txn) } }
        guard let version else { throw StoreError.notADatabase(path: directory, reason: "it has no schema version") }
        // Opened for writing, `ProjectionTables.open` has brought an older version up to date.
        guard options.readOnly ? ProjectionTables.readableSchemaVersions.contains(version) : version == ProjectionTables.schemaVersion else {
            throw StoreError.unsupportedSchema(path: directory, version: version)
        }
        try Self.whileOpening(env) { try openAuxiliary(auxiliary, create: !options.readOnly) }
        // The writer's device_id and token indexes are read from the device records now, not at the first command.
        if !options.readOnly && options.preparesWriter {
            try Self.whileOpening(env) { try env.read { txn in try projectionWriter.prepare(txn, alongside: env) } }
        }
    }

    /// A file LMDB opens but in which no store's tables are found: another program's
    /// LMDB file — or a store whose tree of tables cannot be reached (a review flipped
    /// the root page number in a meta page, and every command said "not a topicstore
    /// database"). The page walk tells them apart; it runs only on this refusal.
    static func notAStore(_ env: Environment, _ directory: String, _ reason: String) -> StoreError {
        guard env.info().lastTransactionID > 0, let file = try? env.checkStructure(maxIssues: 3), !file.isSound else {
            return .notADatabase(path: directory, reason: reason)
        }
        let more = file.issueCount > 1 ? " (and \(file.issueCount - 1) more)" : ""
        return .damaged(path: directory, what: "data.mdb", reason: "\(file.issues[0])\(more); no store's tables can be reached")
    }

    /// Throws `StoreError.damaged` when the file holds a store — records in its log
    /// or in any projection table — but not all of its tables, or no schema version
    /// in `meta`. A file with none of them, or with them all empty (a creation that
    /// stopped before its first record), is left to the checks after (another
    /// program's file, a store to make).
    static func checkTables(_ env: Environment, directory: String) throws {
        let names = [EventLog.databaseName] + ProjectionTables.names
        var present: [Database] = [], missing: [String] = []
        for name in names {
            do {
                present.append(try whileOpening(env) { try env.openDatabases([name], create: false)[0] })
            } catch LMDBError.notFound {
                missing.append(name)
            }
        }
        guard !present.isEmpty else { return }
        let held: [(name: String, entries: Int)] = try whileOpening(env) {
            try env.read { txn in
                try present.map { db in
                    do { return (db.name, try txn.statistics(db).entries) } catch is DamagedTableRecord { return (db.name, 1) }
                }
            }
        }
        let holding = held.filter { $0.entries > 0 }
        guard !holding.isEmpty else { return }
        let holds = holding.first { $0.name == EventLog.databaseName }.map { "its log holds \($0.entries) records" }
            ?? "entries in " + holding.map(\.name).joined(separator: ", ")
        if !missing.isEmpty {
            throw StoreError.damaged(path: directory, what: "data.mdb's table of tables",
                                     reason: "the file holds a topicstore store (\(holds)) but not its table(s) \(missing.joined(separator: ", ")): "
                                        + "their records in the table of tables are damaged; no table is created over them")
        }
        let meta = present[names.firstIndex(of: "meta")!]
        let version = try whileOpening(env) { try env.read { txn in try txn.get(meta, ProjectionTables.schemaVersionKey).map(Array.init) } }
        if version?.count != 4 {
            throw StoreError.damaged(path: directory, what: "meta/schemaVersion",
                                     reason: "the file holds a topicstore store (\(holds)) but its meta table "
                                        + (version == nil ? "has no schema version" : "holds a schema version of \(version!.count) bytes")
                                        + ": the meta table is damaged; no new one is stamped over it")
        }
    }

    /// Runs `body`, a transaction of the store's opening, again after the map changed:
    /// doubled while it is full (the file of a store another process wrote to the end
    /// of its map has no room for even a small transaction to create tables or bring
    /// an older schema up to date), or adopted when another process grew it
    /// (`MDB_MAP_RESIZED`: a server beside this process wrote past the map this one
    /// opened with, which is the file's size when that is above `initialMapSize`).
    /// Nothing else in this process uses the environment yet (or, reopening, every
    /// other transaction waits for the map lock), so the map can be changed here.
    static func whileOpening<T>(_ env: Environment, _ body: () throws -> T) throws -> T {
        for _ in 0..<16 {
            do {
                return try body()
            } catch LMDBError.mapFull {
                try env.setMapSize(env.info().mapSize * 2)
            } catch LMDBError.mapResized {
                try env.setMapSize(0)
            }
        }
        return try body()
    }

    func openAuxiliary(_ names: [String], create: Bool) throws {
        for name in names where auxiliary[name] == nil {
            do {
                let db = try environment.openDatabases([name], create: create)[0]
                auxiliaryTables.withLock { $0[name] = db }
            } catch LMDBError.notFound where !create {
                continue  // a read-only store without the table: absent
            }
        }
    }

    /// The generation this one was retired to, if a compaction switched away from it.
    func retiredTo() throws -> String? {
        let tables = self.tables
        return try environment.read { txn in try Self.retiredTo(tables, txn) }
    }

    /// `retiredTo()`, adopting a map another process grew: only while the store opens,
    /// or under the map lock held exclusively (no other transaction of this process runs).
    func retiredToAdoptingMap() throws -> String? {
        try Self.whileOpening(environment) { try retiredTo() }
    }

    func isRetired(_ txn: borrowing Transaction) throws -> Bool {
        // Only read snapshots count: a write transaction may be the one that retires the file.
        let id = txn.id
        if txn.isReadOnly, id <= currentThrough.load(ordering: .relaxed) { return false }
        let retired = try txn.get(tables.meta, Self.retiredKey) != nil
        if !retired, txn.isReadOnly { currentThrough.max(id, ordering: .relaxed) }
        return retired
    }

    static func retiredTo(_ tables: ProjectionTables, _ txn: borrowing Transaction) throws -> String? {
        guard let v = try txn.get(tables.meta, retiredKey) else { return nil }
        return String(decoding: v, as: UTF8.self)
    }

    func markRetired(to next: String, _ txn: borrowing Transaction) throws {
        try txn.put(tables.meta, Self.retiredKey, Array(next.utf8))
    }

    /// The link the next record extends when the log is empty: genesis, or the
    /// chain head a compaction kept when it removed the log's prefix.
    func chainStart(_ txn: borrowing Transaction) throws -> ChainHash {
        try tables.compactedChainHead(txn)?.hash ?? .genesis
    }
}
