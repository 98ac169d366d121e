import Foundation
import LMDB
import Synchronization
import Projections
import SubscriptionLog

/// What a caller gets back once its command is durable.
public struct Receipt: Sendable, Hashable {
    public var sequence: UInt64
    public var timestamp: Int64
}

/// The store: an LMDB environment holding the log of record and its
/// projections, one writer thread with group commit, and snapshot reads.
///
/// Every command is appended to the log and folded into the projections in the
/// same write transaction; a caller is acknowledged only after that transaction
/// has committed (fsynced unless `Durability.noSync` was chosen).
public final class TopicStore: Sendable {
    public enum Durability: Sendable {
        /// Every commit is synced to disk before callers are acknowledged (the default).
        case durable
        /// Commits are not fsynced (`MDB_NOSYNC`): a machine crash may lose the
        /// last acknowledged commands. For bulk imports that can be redone.
        case noSync
    }

    public struct Options: Sendable {
        public var initialMapSize = 256 << 20
        public var readOnly = false
        public var durability = Durability.durable
        /// Most commands committed in one transaction.
        public var maxBatch = 4096
        /// Read what the writer keeps in memory (its device_id and token indexes: 0.5 s per
        /// million devices) when the store is opened, so the first command does
        /// not wait for it. Tools that write only auxiliary tables (keys,
        /// credentials) turn it off; the writer then loads it at its first command.
        public var preparesWriter = true
        /// Keep a copy of the device records in memory for streaming
        /// recipients (`RecipientCache`): a serving process turns it on. It
        /// costs about the size of the `devices` table in memory and, like the
        /// writer's indexes, a read of that table when the writer starts.
        /// With it, the topics audiences name are kept in memory too (`TopicCache`).
        public var cachesRecipients = false
        /// How many topics, device topic lists and topic codes the writer
        /// keeps decoded between batches (a quarter as many posting chunks)
        /// before it starts its caches afresh: memory against re-reading.
        public var writerCacheEntries = 200_000
        /// Read-only: keep reading the generation opened here when a compaction
        /// retires it, instead of moving to the new one at the next transaction.
        /// One long read (an export, an audit, a replay, a history) then sees one
        /// log to its end: the new generation has dropped the prefix the read may
        /// still be in. The retired files stay readable while the store is open,
        /// though the compaction removes them; their space comes back at `close()`.
        public var staysOnGeneration = false
        public init() {}

        /// Read-only, staying on the generation it opens: for one long read of the log
        /// (export, audit, history, replay) beside a nightly compaction.
        public static var longRead: Options {
            var o = Options()
            o.readOnly = true
            o.staysOnGeneration = true
            return o
        }
    }

    /// The store directory (its generations live inside it).
    public let directory: String
    let options: Options
    let mapLock = ReadWriteLock()
    private let state: Mutex<Generation?>
    /// `state`'s generation as counts from the serving caches read it.
    let servingViews: ServingViews
    /// Set while commits fail for want of storage (see `writeFailure`).
    let failing = Mutex<WriteFailure?>(nil)
    private let auxiliaryNames = Mutex<[String]>([])
    /// When the writer last cleared the reader slots of dead processes (`clearDeadReaders`).
    private let lastReaderCheck = Mutex<ContinuousClock.Instant?>(nil)
    private let writer: CommitWriter?

    /// The environment of the current generation (file compaction switches it).
    public var environment: Environment { current.environment }
    public var log: EventLog { current.log }
    public var tables: ProjectionTables { current.tables }
    public var reader: ProjectionReader { current.reader }
    /// The directory holding the current generation's data.mdb.
    public var environmentDirectory: String { current.directory }
    /// The current generation's name ("" when data.mdb sits in the store directory itself).
    public var generation: String { current.name }
    /// Opened with `Options.staysOnGeneration`: a compaction's switch does not move this store.
    public var staysOnGeneration: Bool { options.readOnly && options.staysOnGeneration }

    /// The open generation. Using a store's tables after `close()` is a
    /// programming error; reads and writes check and throw `StoreError.closed`.
    var current: Generation {
        guard let g = state.withLock({ $0 }) else { preconditionFailure("TopicStore used after close()") }
        return g
    }

    func openGeneration() throws -> Generation {
        guard let g = state.withLock({ $0 }) else { throw StoreError.closed }
        return g
    }

    /// Opens the store in `directory`. Opening for writing creates a new store
    /// there when the directory is missing or holds no database yet.
    public init(directory: String, options: Options = Options()) throws {
        self.directory = directory
        self.options = options
        let g = try Self.open(directory: directory, options: options)
        state = Mutex(g)
        servingViews = ServingViews(g)
        writer = options.readOnly ? nil : CommitWriter(maxBatch: options.maxBatch)
        writer?.start(store: self)
    }

    deinit { writer?.stop() }

    /// The current generation of the store in `directory`, made first when a writer
    /// finds none there (under `CreationLock`, so that processes started together on a
    /// new store make it once and find it whole).
    private static func open(directory: String, options: Options) throws -> Generation {
        do {
            if try prepare(directory: directory, create: !options.readOnly) {
                return try CreationLock.creating(in: directory) {
                    _ = try prepare(directory: directory, create: true)  // (or another process made it meanwhile)
                    return try openGeneration(directory: directory, options: options, auxiliary: [])
                }
            }
            return try openGeneration(directory: directory, options: options, auxiliary: [])
        } catch StoreError.notADatabase where CreationLock.waitForCreation(in: directory) || holdsStore(directory) {
            // Half made by a process creating it now: it is done, look again. Or made
            // whole between the two looks `prepare` takes (no data.mdb, then a listing
            // with one), by a process that has since let go of the lock.
            _ = try prepare(directory: directory, create: !options.readOnly)
            return try openGeneration(directory: directory, options: options, auxiliary: [])
        }
    }

    /// Opens the generation CURRENT names, finishing a switch that a killed
    /// compaction left half done (the old generation retired, CURRENT not yet moved).
    static func openGeneration(directory: String, options: Options, auxiliary: [String]) throws -> Generation {
        var name = try activeGeneration(in: directory)
        for _ in 0..<4 {
            let g = try Generation(name: name, directory: generationDirectory(directory, name), options: options, auxiliary: auxiliary)
            guard let next = try g.retiredToAdoptingMap() else { return g }
            try finishSwitch(in: directory, from: name, to: next)
            name = try activeGeneration(in: directory)
        }
        throw StoreError.notADatabase(path: directory, reason: "its generations keep moving; is a compaction looping?")
    }

    /// Points CURRENT at `next`, which generation `name` was retired to, if it
    /// still names `name` (a compaction killed between the two steps, or one
    /// still running: it writes the same name). When CURRENT names another one,
    /// `next` may be gone: a later compaction retired and removed it in turn
    /// while this process held `name` (an idle server), and CURRENT is where to go.
    private static func finishSwitch(in directory: String, from name: String, to next: String) throws {
        guard try activeGeneration(in: directory) == name else { return }
        guard FileManager.default.fileExists(atPath: generationDirectory(directory, next) + "/data.mdb") else {
            throw StoreError.notADatabase(path: directory, reason: "generation '\(name)' was retired to '\(next)', which is missing")
        }
        try setActiveGeneration(next, in: directory)
    }

    /// Throws `StoreError.notADatabase` unless `directory` already holds a store,
    /// exactly as a read-only open would, creating nothing: for tools that
    /// write to a store but must never create one (compaction).
    public static func requireExisting(directory: String) throws {
        try prepare(directory: directory, create: false)
    }

    /// Files a topicstore directory may hold besides its database.
    static let harmlessNames: Set<String> = ["README.md", ".gitignore", ".gitkeep", "archive", "snapshots"]

    /// Whether `directory` has the file of a store (a data.mdb, or CURRENT naming a generation).
    private static func holdsStore(_ directory: String) -> Bool {
        let fm = FileManager.default
        return fm.fileExists(atPath: directory + "/data.mdb") || fm.fileExists(atPath: directory + "/" + currentFileName)
    }

    /// Checks that `directory` holds a store, or (`create`) is a place to make one:
    /// true when there is none yet, so the caller makes it.
    @discardableResult
    private static func prepare(directory: String, create: Bool) throws -> Bool {
        let fm = FileManager.default
        var isDir: ObjCBool = false
        if !fm.fileExists(atPath: directory, isDirectory: &isDir) {
            guard create else { throw StoreError.notADatabase(path: directory, reason: "the directory does not exist") }
            try fm.createDirectory(atPath: directory, withIntermediateDirectories: true)
            return true
        }
        guard isDir.boolValue else { throw StoreError.notADatabase(path: directory, reason: "it is not a directory") }
        if holdsStore(directory) { return false }
        guard create else { throw StoreError.notADatabase(path: directory, reason: "it holds no data.mdb") }
        let foreign = try fm.contentsOfDirectory(atPath: directory).filter {
            !harmlessNames.contains($0) && !$0.hasSuffix(".jsonl") && !$0.hasSuffix(".jsonl.zst") && !$0.hasPrefix(".")
        }
        guard foreign.isEmpty else {
            throw StoreError.notADatabase(path: directory,
                reason: "it holds other files (\(foreign.sorted().prefix(3).joined(separator: ", "))) and no data.mdb; refusing to create a store there")
        }
        return true
    }

    /// How often this store's writer read the whole device table since the store
    /// was opened (every generation it used): for its device indexes, and for the
    /// recipient cache.
    public var writerTableReads: (deviceIndexes: Int, recipientCache: Int) {
        let earlier = retiredTableReads.withLock { $0 }
        guard let g = state.withLock({ $0 }) else { return earlier }
        return (earlier.0 + g.projectionWriter.deviceIndexLoads, earlier.1 + g.projectionWriter.recipientCacheFills)
    }
    private let retiredTableReads = Mutex<(Int, Int)>((0, 0))

    /// Group-commit counters since this store was opened (zero when read-only).
    public var commitCounters: CommitCounters { writer?.counters ?? CommitCounters(batches: 0, commands: 0, batchesBySize: []) }

    /// Stops taking commands, commits what was accepted, stops the writer and
    /// lets go of the environment (it closes when nothing else holds it), so the
    /// directory can be opened again in this process.
    public func close() {
        writer?.stop()
        letGoOfGeneration(waitingForReaders: true)
    }

    /// `close()`, waiting at most `seconds` for the writer to commit what it holds.
    /// Returns false when it had not finished by then (its transaction does not end:
    /// another process holds LMDB's write lock, say): the store is closed to new
    /// commands all the same, and the writer answers its callers if it ever ends.
    /// For a process about to exit, which must not wait for ever.
    public func close(waitingAtMost seconds: Double) -> Bool {
        let finished = writer?.stop(timeout: max(0, seconds)) ?? true
        // Without waiting: a writer still in its transaction, or a long read
        // (a stream, an export), may hold the map lock's read side.
        letGoOfGeneration(waitingForReaders: false)
        return finished
    }

    /// Closes the store to reads and lets go of its generation. Counts from
    /// the serving caches are refused at once, and the caches emptied (a count
    /// still reading them goes to a snapshot, and finds the store closed).
    /// `waitingForReaders`, it returns once the reads under the map lock have
    /// ended, so the environment is closed unless something else holds it.
    private func letGoOfGeneration(waitingForReaders: Bool) {
        state.withLock { $0 = nil }
        servingViews.close()
        if waitingForReaders { mapLock.withWriteLock {} }
    }

    // MARK: Reading

    /// Runs `body` in one read transaction: one consistent snapshot of the
    /// current generation (a retired one is left for the new one first).
    public func read<R>(_ body: (borrowing Transaction) throws -> R) throws -> R {
        try readGeneration { txn, _ in try body(txn) }
    }

    /// The counts of `expression` for `project` in the newest committed snapshot:
    /// `reader.counts(project:_:_:)` in a read transaction, or, in a serving
    /// process whose caches hold that snapshot, from them with no transaction
    /// and no lock but the caches' (`ProjectionReader.heldCounts`: a per-user
    /// topic, a list of them; LMDB's newest transaction id read from the meta
    /// pages' own mapping, `ServingView`).
    public func counts(project: String, _ expression: AudienceExpression) throws -> AudienceCounts {
        if let held = servingViews.withCurrent({ view in
            view.metaPages.lastTransactionID.flatMap { view.reader.heldCounts(project: project, expression, tip: $0) }
        }) {
            return held
        }
        return try readGeneration { txn, g in try g.reader.counts(project: project, expression, txn) }
    }

    /// The counts of a send to any of `topics` (MPush's `topics` array): the
    /// same answer as `counts(project:_:)` of `AudienceExpression.anyOf(topics)`,
    /// with the list taken as it is where the serving caches answer. An empty
    /// list is no device.
    public func counts(project: String, anyOf topics: [String]) throws -> AudienceCounts {
        // The same steps as `counts(project:_:)`, written out: through one helper taking
        // a closure, one per-user topic took 2.5 ns more (114 → 116.7 ns, loop).
        if let held = servingViews.withCurrent({ view in
            view.metaPages.lastTransactionID.flatMap { view.reader.heldCounts(project: project, anyOf: topics, tip: $0) }
        }) {
            return held
        }
        return try readGeneration { txn, g in try g.reader.counts(project: project, anyOf: topics, txn) }
    }

    /// `counts(project:anyOf:)` of codes given as their bytes (as an HTTP
    /// request carries a list of users): the serving caches read them in
    /// place; a count they do not answer is read from a snapshot with them as Strings.
    public func counts(project: String, anyOf topics: TopicCodeList) throws -> AudienceCounts {
        if let held = servingViews.withCurrent({ view in
            view.metaPages.lastTransactionID.flatMap { view.reader.heldCounts(project: project, anyOf: topics, tip: $0) }
        }) {
            return held
        }
        return try readGeneration { txn, g in try g.reader.counts(project: project, anyOf: topics.strings, txn) }
    }

    /// Throws `StoreError.removed` when the database file was deleted while open
    /// (a health check: the store then acknowledges no command).
    public func checkFileIsPresent() throws {
        let g = try openGeneration()
        if g.environment.fileWasRemoved { throw StoreError.removed(path: g.environment.path) }
    }

    /// Throws `StoreError.corruptHead` when the log's last record is damaged (a
    /// health check, and a server's start): no event can be chained onto it.
    public func checkHead() throws {
        try readGeneration { txn, g in _ = try Self.head(log, g.tables, directory: directory, txn) }
    }

    /// The whole chain link of the record at `sequence` (`EventLog.link(at:)`:
    /// computed from the last whole link before it, or from the head a
    /// compaction kept before the log's first record).
    public func chainLink(at sequence: UInt64, _ txn: borrowing Transaction) throws -> ChainHash {
        try log.link(at: sequence, txn, start: { try Self.compactedLink(at: $0, tables, txn) })
    }

    /// The log's last sequence and its whole chain link, or nil when the log is empty.
    public func chainHead(_ txn: borrowing Transaction) throws -> ChainHead? {
        try log.head(txn, start: { try Self.compactedLink(at: $0, tables, txn) })
    }

    /// The link a compaction kept at `sequence` (its horizon), or nil when it kept none there.
    static func compactedLink(at sequence: UInt64, _ tables: ProjectionTables, _ txn: borrowing Transaction) throws -> ChainHash? {
        guard let head = try tables.compactedChainHead(txn), head.sequence == sequence else { return nil }
        return head.hash
    }

    /// The link the next record extends: the head this writer committed last
    /// when the log still ends at it (the last record's checksum and kept link
    /// bytes checked, as computing the head would check them), else the head
    /// computed (`head`: up to 63 records hashed, which a commit of one command
    /// would pay every time), or the compaction's head for an empty log.
    static func chainToExtend(_ log: EventLog, _ g: Generation, last: UInt64?, directory: String,
                              _ txn: borrowing Transaction) throws -> ChainHash {
        if let last, let hint = g.writerHead.withLock({ $0 }), hint.sequence == last,
           try log.withRecordBytes(at: last, txn, { (try? RecordCodec.storedLinkPart(of: $0, key: last).matches(hint.hash)) == true }) == true {
            return hint.hash
        }
        return try head(log, g.tables, directory: directory, txn)?.hash ?? g.chainStart(txn)
    }

    /// The log's head; a damaged record between the last whole link and the
    /// last record is `StoreError.corruptHead`: no event can be chained onto it.
    static func head(_ log: EventLog, _ tables: ProjectionTables, directory: String,
                     _ txn: borrowing Transaction) throws -> ChainHead? {
        do {
            return try log.head(txn, start: { try compactedLink(at: $0, tables, txn) })
        } catch let e as RecordCorruption {
            throw StoreError.corruptHead(path: directory, sequence: e.sequence, reason: "byte \(e.offset): \(e.reason)")
        }
    }

    /// A read transaction with the generation it runs in (for auxiliary tables).
    func readGeneration<R>(_ body: (borrowing Transaction, Generation) throws -> R) throws -> R {
        while true {
            let g = try openGeneration()
            do {
                return try mapLock.withReadLock {
                    try g.environment.read { txn in
                        if !staysOnGeneration, try g.isRetired(txn) { throw Generation.Retired() }
                        return try body(txn, g)
                    }
                }
            } catch LMDBError.mapResized {
                try adoptGrownMap(g)
            } catch is Generation.Retired {
                try reopen(after: g)
            }
        }
    }

    /// Another process grew the map: adopt its size.
    func adoptGrownMap(_ g: Generation) throws {
        try mapLock.withWriteLock { try g.environment.setMapSize(0) }
    }

    /// Doubles the map (after `MDB_MAP_FULL`).
    func growMap(_ g: Generation) throws {
        try mapLock.withWriteLock {
            let size = g.environment.info().mapSize
            try g.environment.setMapSize(size * 2)
        }
    }

    /// Leaves retired generation `g` for the one CURRENT names (once, whichever thread gets here first).
    func reopen(after g: Generation) throws {
        try mapLock.withWriteLock {
            guard state.withLock({ $0 }) === g else { return }
            // Every reader and writer of this process waits here: the writer's device
            // indexes are left to its first command (0.5 s per million devices, once).
            var lazy = options
            lazy.preparesWriter = false
            // A compaction retires `g` before it moves CURRENT. If CURRENT still
            // names `g` (open here: an environment opens once per process), move
            // it to where `g` was retired to, as the compaction is about to.
            if let target = try g.retiredToAdoptingMap() { try Self.finishSwitch(in: directory, from: g.name, to: target) }
            let next = try Self.openGeneration(directory: directory, options: lazy, auxiliary: auxiliaryNames.withLock { $0 })
            // The new generation holds the same device records as `g` at its end (a compaction
            // copies them): its writer takes over `g`'s device indexes and recipient cache
            // instead of reading them again at the first command (about a second per million
            // devices, which every writer of the store would wait for). The writer thread
            // touches them only under the map lock, which is held exclusively here.
            if !options.readOnly, next !== g {
                _ = try? Generation.whileOpening(g.environment) {
                    try Generation.whileOpening(next.environment) {
                        try g.environment.read { old in
                            try next.environment.read { new in try next.projectionWriter.adoptState(of: g.projectionWriter, old, new) }
                        }
                    }
                }
            }
            retiredTableReads.withLock { $0 = ($0.0 + g.projectionWriter.deviceIndexLoads, $0.1 + g.projectionWriter.recipientCacheFills) }
            state.withLock { $0 = next }
            servingViews.publish(next)
        }
    }

    // MARK: Auxiliary tables

    /// Opens (creating unless read-only) named tables beside the store's own,
    /// kept across generation switches. Access control keeps projects and keys there.
    public func openAuxiliary(_ names: [String]) throws {
        auxiliaryNames.withLock { for n in names where !$0.contains(n) { $0.append(n) } }
        try openGeneration().openAuxiliary(names, create: !options.readOnly)
    }

    /// A read transaction with the auxiliary tables (a name missing in a read-only store is absent).
    public func readAuxiliary<R>(_ body: (borrowing Transaction, [String: Database]) throws -> R) throws -> R {
        try readGeneration { txn, g in try body(txn, g.auxiliary) }
    }

    /// A write transaction on the auxiliary tables, on the calling thread. It
    /// waits for the store's writer like any LMDB writer, grows a full map and
    /// follows a generation switch; it must not touch the store's own tables.
    public func writeAuxiliary<R>(_ body: (borrowing Transaction, [String: Database]) throws -> R) throws -> R {
        guard !options.readOnly else { throw StoreError.readOnly }
        while true {
            let g = try openGeneration()
            do {
                var transaction = 0, changed = false
                let result = try mapLock.withReadLock {
                    try g.environment.write { txn in
                        if try g.isRetired(txn) { throw Generation.Retired() }
                        transaction = txn.id
                        let result = try body(txn, g.auxiliary)
                        changed = txn.hasChanges
                        return result
                    }
                }
                // The projections did not change: counts answered from the caches for
                // the snapshot before go on for this one (see `counts(project:_:)`).
                // A transaction that changed nothing commits no snapshot, and its id
                // goes to the next write, which may be another process's: reported
                // anyway, the caches waited for a transaction that never came (every
                // count after it read a snapshot until the next commit: a server's
                // start, whose first-run check writes nothing once a project exists),
                // or took another process's commit for this one.
                if changed { g.reader.topicCache?.didCommitBeside(transaction: transaction) }
                return result
            } catch LMDBError.mapFull {
                try growMap(g)
            } catch LMDBError.mapResized {
                try adoptGrownMap(g)
            } catch is Generation.Retired {
                try reopen(after: g)
            }
        }
    }

    // MARK: Generations (file compaction)

    /// Copies the current generation's environment into `directory`
    /// (`compact`: live pages only), adopting a map another process grew meanwhile.
    public func copyEnvironment(to directory: String, compact: Bool) throws {
        while true {
            let g = try openGeneration()
            do {
                return try mapLock.withReadLock { try g.environment.copy(to: directory, compact: compact) }
            } catch LMDBError.mapResized {
                try adoptGrownMap(g)
                // LMDB creates the copy exclusively (O_EXCL): the failed one goes first.
                try? FileManager.default.removeItem(atPath: directory + "/data.mdb")
            }
        }
    }

    /// Writes the current generation, as of one read transaction, into `directory` (an
    /// existing empty directory) with every page full (`PackedCopy`); `startingAt` leaves
    /// out the keys before the given one of a table (the log records a compaction trims).
    /// With `packingLogAfter`, the log's records after that sequence are written in
    /// compressed blocks (`LogBlockRewriter`), those at or before it left out.
    public func packedCopy(to directory: String, startingAt: [String: [UInt8]] = [:],
                           packingLogAfter horizon: UInt64? = nil) throws -> PackedCopy.Report {
        var rewriting: [String: @Sendable () -> any PackedCopy.EntryRewriter] = [:]
        if let horizon { rewriting[EventLog.databaseName] = { LogBlockRewriter(after: horizon) } }
        while true {
            let g = try openGeneration()
            do {
                return try mapLock.withReadLock { try PackedCopy.copy(g.environment, to: directory, startingAt: startingAt, rewriting: rewriting) }
            } catch LMDBError.mapResized {
                try adoptGrownMap(g)
            }
            // A failed try leaves its files: the next starts from an empty directory.
            for name in ["data.mdb", "lock.mdb"] { try? FileManager.default.removeItem(atPath: directory + "/" + name) }
        }
    }

    /// Bytes a compacting copy of the current generation would write (its pages in use), as of now.
    public func bytesInUse() throws -> Int {
        try readGeneration { txn, g in
            let info = g.environment.info()
            return max(0, info.lastPage + 1 - (try txn.freePages())) * info.pageSize
        }
    }

    /// The generation the current one was retired to, if a switch committed
    /// (CURRENT may not name it yet: the next open finishes the switch).
    public func retiredTo() throws -> String? {
        while true {
            let g = try openGeneration()
            do {
                return try mapLock.withReadLock { try g.retiredTo() }
            } catch LMDBError.mapResized {
                try adoptGrownMap(g)
            }
        }
    }

    /// Retires the current generation in favour of `generation` (a directory
    /// inside the store directory holding a complete copy). It takes the write
    /// transaction of the current environment — which pauses every writer of
    /// every process — calls `catchUp` with it so the caller can carry the last
    /// records over and commit the new generation, marks the old one retired,
    /// commits, and points CURRENT at the new one. Every store that has the old
    /// generation open, this one included, moves over at its next transaction;
    /// close any environment you opened on the new generation before then (LMDB
    /// must not have one file open twice in a process). When another process
    /// grew the map, or the marker does not fit, the transaction starts again
    /// and `catchUp` is called again: it must carry over only what it has not yet.
    public func retire(to generation: String, catchUp: (borrowing Transaction) throws -> Void) throws {
        guard !options.readOnly else { throw StoreError.readOnly }
        guard FileManager.default.fileExists(atPath: Self.generationDirectory(directory, generation) + "/data.mdb") else {
            throw StoreError.notADatabase(path: Self.generationDirectory(directory, generation), reason: "the new generation holds no data.mdb")
        }
        let g = try openGeneration()
        while true {
            do {
                try mapLock.withReadLock {
                    try g.environment.write { txn in
                        if try g.isRetired(txn) { throw Generation.Retired() }
                        try catchUp(txn)
                        try g.markRetired(to: generation, txn)
                    }
                }
                break
            } catch LMDBError.mapResized {
                try adoptGrownMap(g)
            } catch LMDBError.mapFull {
                try growMap(g)
            }
        }
        try Self.setActiveGeneration(generation, in: directory)
    }

    // MARK: Writing

    /// Appends `event` and waits until it is durable.
    @discardableResult
    public func submit(_ event: Event) async throws -> Receipt {
        guard let writer else { throw StoreError.readOnly }
        try Validation.validate(event)
        let prepared = try Self.prepare(event)
        return try await withCheckedThrowingContinuation { continuation in
            writer.enqueue(CommitWriter.Pending(event: event, prepared: prepared) { continuation.resume(with: $0) })
        }
    }

    /// Submits `events` and blocks until each is durable or refused; results
    /// are in the order given. Invalid events are refused alone.
    public func submitAndWait(_ events: [Event]) -> [Result<Receipt, any Error>] {
        submitBatch(events).wait()
    }

    /// Submits `events` and returns at once; `wait()` on the result blocks until
    /// each is durable or refused (results in the order given). A caller can
    /// prepare its next batch meanwhile, so the writer is never idle between them.
    public func submitBatch(_ events: [Event]) -> SubmittedBatch {
        let batch = SubmittedBatch()
        submit(events) { batch.fill($0) }
        return batch
    }

    /// `submitBatch` for records that keep a time of their own (`load` of an
    /// export: a rejection is compared with the token's original time, so the
    /// same lines fold to the same projections). `times[i]` (ms since 1970, or
    /// nil for the commit's time) is what event i's record carries, raised to
    /// the log's last time so times never go back, and never later than the commit.
    public func submitBatch(_ events: [Event], at times: [Int64?]) -> SubmittedBatch {
        precondition(times.count == events.count, "one time per event")
        let batch = SubmittedBatch()
        submit(events, at: times) { batch.fill($0) }
        return batch
    }

    /// Submits `events` without waiting: `completion` gets one result per event,
    /// in the order given, once each is durable or refused — on the writer
    /// thread, or at once on this thread when nothing reaches the writer.
    /// Invalid events are refused alone. `completion` must not block.
    public func submit(_ events: [Event], completion: @escaping @Sendable ([Result<Receipt, any Error>]) -> Void) {
        submit(events, at: nil, completion: completion)
    }

    private func submit(_ events: [Event], at times: [Int64?]?, completion: @escaping @Sendable ([Result<Receipt, any Error>]) -> Void) {
        guard let writer else { return completion(events.map { _ in .failure(StoreError.readOnly) }) }
        let results = ResultSlots(count: events.count, completion: completion)
        var pending: [CommitWriter.Pending] = []
        pending.reserveCapacity(events.count)
        for (i, event) in events.enumerated() {
            let prepared: PreparedRecord
            do {
                try Validation.validate(event)
                prepared = try Self.prepare(event)
            } catch {
                results.set(i, .failure(error))
                continue
            }
            pending.append(CommitWriter.Pending(event: event, prepared: prepared, time: times?[i]) { result in results.set(i, result) })
        }
        if pending.isEmpty { return }
        writer.enqueue(pending)
    }

    /// `event`'s log record, encoded on the caller's thread (the writer only
    /// seals it). Validation keeps out what a record cannot hold; should
    /// something get past it, it is refused here, alone, as a validation error.
    static func prepare(_ event: Event) throws(InvalidCommand) -> PreparedRecord {
        do throws(FieldTooLong) {
            return try RecordCodec.prepare(event)
        } catch {
            throw InvalidCommand([ValidationError(field: error.field, message: error.message)])
        }
    }

    /// One command, blocking: for command-line tools and tests.
    @discardableResult
    public func submitAndWait(_ event: Event) throws -> Receipt {
        try submitAndWait([event])[0].get()
    }

    /// Commits `batch` in one transaction: called on the writer thread only. Each command
    /// has its receipt (one whose record the log cannot hold was refused when it was
    /// submitted); a failure of the transaction is every command's.
    /// A reader killed inside its transaction (`kill -9` of an export, of a compaction
    /// planning) leaves its slot in lock.mdb pinning that snapshot: LMDB then reuses no
    /// page freed after it, and the file grows with every commit. LMDB clears such slots
    /// only when asked (`mdb_reader_check`, which the store also does when it opens), so
    /// the writer asks, at most once a second: a scan of the reader table.
    private func clearDeadReaders(_ environment: Environment) {
        let now = ContinuousClock.now
        let due = lastReaderCheck.withLock { last -> Bool in
            guard last.map({ $0.duration(to: now) >= .seconds(1) }) ?? true else { return false }
            last = now
            return true
        }
        if due { _ = try? environment.checkReaders() }
    }

    func commit(_ batch: [CommitWriter.Pending]) -> Result<[Result<Receipt, any Error>], any Error> {
        while true {
            let g: Generation
            do { g = try openGeneration() } catch { return .failure(error) }
            clearDeadReaders(g.environment)
            let log = g.log
            let projections = g.projectionWriter
            var transactionID = 0
            var committedHead: ChainHead?
            do {
                let receipts = try mapLock.withReadLock {
                    let receipts = try g.environment.write { txn -> [Result<Receipt, any Error>] in
                        transactionID = txn.id
                        // A compaction may have retired this generation while we waited for the lock.
                        if try g.isRetired(txn) { throw Generation.Retired() }
                        try projections.begin(txn)
                        let bounds = try log.bounds(txn)
                        if bounds == nil, let applied = try Self.projectionsOnlySequence(g.tables, log, txn) {
                            throw StoreError.projectionsOnly(path: directory, sequence: applied)
                        }
                        // After a compaction removed the whole log, numbering goes on from the projections.
                        var sequence = try bounds?.last ?? g.tables.appliedSequence(txn)
                        var lastTime = bounds?.lastTimestamp ?? 0
                        var chain = try Self.chainToExtend(log, g, last: bounds?.last, directory: directory, txn)
                        let now = Int64(Date().timeIntervalSince1970 * 1000)
                        var receipts: [Result<Receipt, any Error>] = []
                        receipts.reserveCapacity(batch.count)
                        // One cursor appends the batch: it stays on the log's last page.
                        try txn.withCursor(log.database) { logCursor in
                            // By index: `for pending in batch` copied each command (a retain and a
                            // release of every string it holds and of its completion).
                            for i in batch.indices {
                                let time = max(min(batch[i].time ?? now, now), lastTime)
                                sequence += 1
                                lastTime = time
                                try log.append(batch[i].prepared, sequence: sequence, timestamp: time,
                                               chainingFrom: &chain, cursor: &logCursor)
                                try Fold.apply(LogRecord(sequence: sequence, timestamp: time, event: batch[i].event), to: projections, txn)
                                receipts.append(.success(Receipt(sequence: sequence, timestamp: time)))
                            }
                        }
                        try projections.flush(txn)
                        committedHead = ChainHead(sequence: sequence, hash: chain)
                        return receipts
                    }
                    g.writerHead.withLock { $0 = committedHead }
                    // Under the map lock, as everything the writer does with `projections`
                    // (a switch to a new generation hands them over with the lock held).
                    projections.didCommit(transactionID: transactionID)
                    return receipts
                }
                // Committed into a file someone deleted: nothing will read it again.
                if g.environment.fileWasRemoved { return .failure(StoreError.removed(path: g.environment.path)) }
                noteCommit(failedWith: nil)
                return .success(receipts)
            } catch LMDBError.mapFull {
                do { try growMap(g) } catch { return .failure(error) }
            } catch LMDBError.mapResized {
                do { try adoptGrownMap(g) } catch { return .failure(error) }
            } catch is Generation.Retired {
                do { try reopen(after: g) } catch { return .failure(error) }
            } catch {
                let seen = Self.diagnosed(error, directory: g.directory)
                noteCommit(failedWith: seen)
                return .failure(seen)
            }
        }
    }
}

/// Commits by the writer since the store was opened. `batchesBySize[i]` counts
/// batches of at most 2^i commands (and more than 2^(i-1)); the last bucket takes the rest.
public struct CommitCounters: Sendable, Hashable {
    public var batches: Int
    public var commands: Int
    public var batchesBySize: [Int]
    /// Group commits that failed as a whole (a full disk, damage): their commands were refused.
    public var failedBatches = 0
    /// Committed batches by duration (fold, append and sync): bucket i counts those of at most
    /// `durationBounds[i]` seconds that no smaller bound holds; the last counts the rest.
    public var batchesByDuration: [Int] = Array(repeating: 0, count: durationBounds.count + 1)
    public var durationSeconds = 0.0
    public static let durationBounds: [Double] = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5]

    public init(batches: Int, commands: Int, batchesBySize: [Int]) {
        self.batches = batches
        self.commands = commands
        self.batchesBySize = batchesBySize
    }
}

/// Result slots filled from the writer thread, read once everything is in.
/// Collects one result per submitted event and calls the completion when the last arrives.
private final class ResultSlots: @unchecked Sendable {
    private var slots: [Result<Receipt, any Error>?]
    private var missing: Int
    private let lock = NSLock()
    private let completion: @Sendable ([Result<Receipt, any Error>]) -> Void

    init(count: Int, completion: @escaping @Sendable ([Result<Receipt, any Error>]) -> Void) {
        slots = Array(repeating: nil, count: count)
        missing = count
        self.completion = completion
        if count == 0 { completion([]) }
    }

    func set(_ i: Int, _ r: Result<Receipt, any Error>) {
        lock.lock()
        slots[i] = r
        missing -= 1
        let finished = missing == 0
        lock.unlock()
        if finished { completion(slots.map { $0 ?? .failure(StoreError.closed) }) }
    }
}

/// The results of a batch given to `TopicStore.submitBatch`.
public final class SubmittedBatch: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    /// Set once by the writer's completion, before it signals `done`.
    private var results: [Result<Receipt, any Error>] = []

    fileprivate func fill(_ results: [Result<Receipt, any Error>]) {
        self.results = results
        done.signal()
    }

    /// Blocks until every command of the batch is durable or refused. Call it once.
    public func wait() -> [Result<Receipt, any Error>] {
        done.wait()
        return results
    }
}
