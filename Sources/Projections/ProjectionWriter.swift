import Dispatch
import LMDB
import Roaring
import SubscriptionLog

/// The projections' side of one write transaction. It caches what a batch of
/// events touches over and over (project counters, topic records, topic codes,
/// posting containers, device topic lists) and writes each back once in
/// `flush`, which must run before commit. Device records are written
/// straight through; which device has a device_id and which holds a token are
/// kept in memory (`DeviceDirectory`), checked against the store at every `begin`.
///
/// Used by the live write path and by replay alike, through `Fold.apply`.
public final class ProjectionWriter {
    public let tables: ProjectionTables

    struct ChunkKey: SlotKey {
        var pid: UInt32; var topic: UInt32; var high: UInt16
        var hash64: UInt64 { (UInt64(pid) << 48 ^ UInt64(topic) << 16) ^ UInt64(high) }
    }
    struct TopicKey: SlotKey {
        var pid: UInt32; var topic: UInt32
        var hash64: UInt64 { packed }
        /// The key as one integer, whose order is the table's key order (`pid ‖ topic`).
        var packed: UInt64 { UInt64(pid) << 32 | UInt64(topic) }
    }
    struct DeviceKey: SlotKey {
        var pid: UInt32; var ordinal: UInt32
        var hash64: UInt64 { packed }
        /// The key as one integer, whose order is the table's key order (`pid ‖ ordinal`).
        var packed: UInt64 { UInt64(pid) << 32 | UInt64(ordinal) }
    }

    struct Cached<Value> {
        var value: Value
        var dirty: Bool
    }

    private var projects = ProjectCache()
    private var topics = SlotTable<TopicKey, Cached<TopicRecord>>()
    private var postings: PostingCache
    private var memberships = MembershipLists()
    /// Topic codes looked up in the store or created, by project: an
    /// open-addressing table over the codes' bytes (`NameIndex`), where a
    /// `Dictionary` keyed by (pid, code) hashed each with SipHash (about
    /// 1,300 instructions to insert a new topic's code). A dropped topic's
    /// code is a tombstone, which sends its next lookup to the store.
    private let topicCodes = NameIndex()
    /// The last few thousand codes looked up (see `RecentTopicCodes`).
    private let recentCodes = RecentTopicCodes()
    /// In the compact layout, the subscriber counts of topics over several
    /// slices, kept when the caches are bounded (see `flush`) until the record
    /// is loaded again, by pid << 32 | topic id:
    /// counting a loaded record's chunks again is one read per slice (153 for
    /// `all` at 10M devices), and at 10M there are 100,000 such shared topics.
    private var savedCounts: [UInt64: UInt32] = [:]
    /// Slice changes of shared topics since the last flush (see `settleSliceChanges`).
    private var sliceChanges: [SliceChange] = []
    /// `storedTop`'s answers in the open transaction, by pid; forgotten when the transaction's chunks change.
    private var storedTops: [UInt32: UInt16?] = [:]
    /// The greatest key of `topic_codes` in the open transaction, or none
    /// there (`codeSortsLast`): read at the first lookup that needs it, raised
    /// by `createTopic`. (A removed code leaves it greater than the table's
    /// greatest, which only sends a lookup to the table.)
    private var lastCodeKey = GreatestKey()
    /// Slots changed since the last flush, so a flush touches only them (the
    /// caches themselves may hold hundreds of thousands of clean entries).
    /// Not kept in a build, which writes every slot marked dirty in key order
    /// (`writeBuild`) and never flushes: a rebuild of bench's 1M store listed
    /// two million slots there, in arrays grown by copying, for nothing.
    private var dirtyTopics: [Int] = []
    private var dirtyMemberships: [Int] = []
    private var nextProjectID: UInt32?
    public private(set) var appliedSequence: UInt64

    /// The live writer of a serving process keeps its recipient cache (see
    /// `RecipientCache`); nil otherwise.
    public let recipientCache: RecipientCache?
    /// The device records of the open transaction, for the recipient cache once it commits.
    private var recipientChanges = RecipientCache.Changes()
    /// The live writer of a serving process drops the topics each commit
    /// changed from its readers' topic directory (see `TopicCache`); nil otherwise.
    public let topicCache: TopicCache?
    /// The topics the open transaction changed (pid << 32 | topic id), for the topic cache once it commits.
    private var topicChanges: [UInt64] = []
    /// The topics' chunks the open transaction rewrote and left holding devices, likewise:
    /// the directory keeps the topic's other slices.
    private var topicSliceChanges: [TopicCache.ChangedSlice] = []
    /// The slices whose live sets' chunks the open transaction changed (pid << 32 | slice), likewise.
    private var liveSliceChanges: [UInt64] = []
    /// The sequence the open transaction started from, and the writer stamp stored then.
    private var transactionStart: UInt64 = 0
    private var startedOnStamp: UInt64?
    /// The device records the open transaction wrote or read (see `TransactionDevices`); live path only.
    private var transactionDevices = TransactionDevices()
    /// Where `put(device:)` encodes a record (live path).
    private var deviceBuffer = [UInt8](repeating: 0, count: 512)
    /// The device records the open transaction wrote or deleted (pid << 32 | ordinal), for its
    /// journal entry and, once it commits, for the topic cache (see `didCommit`).
    private var journalDevices: [UInt64] = []

    /// How often this writer read the whole `devices` table: for its device_id
    /// and token indexes, and for the recipient cache. Once when it starts; again
    /// only when it cannot tell what another writer changed.
    public private(set) var deviceIndexLoads = 0
    public private(set) var recipientCacheFills = 0

    /// How many topics, device topic lists or topic codes the live writer's
    /// caches hold (and a quarter as many posting chunks) before `flush`
    /// starts them afresh.
    public let cacheEntries: Int

    public init(tables: ProjectionTables, recipientCache: RecipientCache? = nil, topicCache: TopicCache? = nil,
                cacheEntries: Int = 200_000) {
        self.tables = tables
        self.appliedSequence = 0
        self.recipientCache = recipientCache
        self.topicCache = topicCache
        self.cacheEntries = cacheEntries
        self.build = nil
        self.unretainedBuild = nil
        self.directory = DeviceDirectory(recordsChanges: true)
        self.postings = PostingCache(tracksLastChunks: false)
        self.postingWorker = nil
    }

    /// Which device has each device_id and holds each token (see `DeviceDirectory`).
    private var directory: DeviceDirectory

    /// How topics are laid out in the tables written (read at `begin`).
    private(set) var topicLayout = ProjectionTables.TopicLayout.legacy
    /// The form of the target's `topic_codes` keys, read with `topicLayout`.
    private(set) var codeOrder = ProjectionTables.TopicCodeOrder.byLength

    /// The id of a topic created now, from the project's topic sequence.
    func newTopicID(single: Bool, _ project: inout ProjectRecord) throws -> UInt32 {
        let n = project.nextTopicID
        guard n < ProjectionTables.topicIDLimit else {
            throw ProjectionCorruption(place: "projects/\(project.id)", reason: "topic ids exhausted")
        }
        project.nextTopicID += 1
        return single && topicLayout == .compact ? n | ProjectionTables.singleTopicBit : n
    }

    /// Topic `slot` gained a subscriber with event `sequence`. The legacy
    /// layout rewrites its record for the count; the compact one keeps the
    /// count in the cache only, and rewrites the record for its first subscriber.
    func addSubscriber(at slot: Int, sequence: UInt64) {
        if topicLayout == .legacy || topics.values[slot].value.subscribers == 0 {
            modifyTopic(at: slot) { $0.subscribers += 1; $0.lastChangeSeq = sequence }
        } else {
            topics.values[slot].value.subscribers += 1
        }
    }

    /// Topic `slot` lost a subscriber with event `sequence` (see `addSubscriber`: the compact
    /// layout rewrites the record for its last subscriber).
    func removeSubscriber(at slot: Int, sequence: UInt64, _ place: @autoclosure () -> String) throws {
        let count = topics.values[slot].value.subscribers
        guard count > 0 else { throw ProjectionCorruption(place: place(), reason: "subscriber count below zero") }
        if topicLayout == .legacy || count == 1 {
            modifyTopic(at: slot) { $0.subscribers -= 1; $0.lastChangeSeq = sequence }
        } else {
            topics.values[slot].value.subscribers -= 1
        }
    }

    /// In build mode (replay, import): nil on the live path.
    let build: BuildState?
    /// `build` again, for the calls a rebuild makes through it per event: a
    /// call through `build` (or through its `topicCodes` or `devices`) was
    /// wrapped in a retain and a release of each, atomic operations the
    /// compiler keeps because it cannot tell that the callee leaves those
    /// references alone: 14% of a rebuild's folding thread went to retains and
    /// releases, the topic code lookups' alone 2.4% (perf). Called through
    /// `_withUnsafeGuaranteedRef`, with no retain; `build` keeps it alive.
    /// (A generic helper taking the object and a closure kept one of them;
    /// `withBuildDevices` and `withBuildCodes` do not, checked in the disassembly.)
    private let unretainedBuild: Unmanaged<BuildState>?

    /// `body` with the build's device records, reached through `unretainedBuild`
    /// with no retain; nil on the live path.
    @inline(__always)
    private func withBuildDevices<R>(_ body: (BuildDevices) throws -> R) rethrows -> R? {
        guard let b = unretainedBuild else { return nil }
        return try b._withUnsafeGuaranteedRef { try Unmanaged.passUnretained($0.devices)._withUnsafeGuaranteedRef(body) }
    }

    /// `body` with the build's topic codes, as `withBuildDevices`.
    @inline(__always)
    private func withBuildCodes<R>(_ body: (NameIndex) throws -> R) rethrows -> R? {
        guard let b = unretainedBuild else { return nil }
        return try b._withUnsafeGuaranteedRef { try Unmanaged.passUnretained($0.topicCodes)._withUnsafeGuaranteedRef(body) }
    }

    /// A writer that builds projections into tables only it writes (a replay
    /// or import target): nothing is written until `writeBuild`, which writes
    /// every table in key order, so the caches hold the whole build in memory.
    /// When `targetIsEmpty`, an entry the build does not hold does not exist
    /// and lookups never go to LMDB. `memoryBudget` (bytes, roughly) is what
    /// `isOverBudget` compares the build with, for a caller that writes in rounds.
    public init(tables: ProjectionTables, buildingWithEmptyTarget targetIsEmpty: Bool, memoryBudget: Int) {
        self.tables = tables
        self.appliedSequence = 0
        self.recipientCache = nil
        self.topicCache = nil
        self.cacheEntries = 200_000  // not used: a build is bounded by `memoryBudget`
        let build = BuildState(targetIsEmpty: targetIsEmpty, memoryBudget: memoryBudget)
        self.build = build
        self.unretainedBuild = Unmanaged.passUnretained(build)
        self.directory = DeviceDirectory(recordsChanges: false)
        self.postings = PostingCache(tracksLastChunks: true)
        self.postingWorker = targetIsEmpty ? PostingWorker() : nil
        self.handsPostingsToWorker = targetIsEmpty
        if targetIsEmpty { pendingPostings.reserveCapacity(PostingWorker.batch) }
    }

    /// A build into an empty target changes its bitmaps on a second core (see
    /// `PostingWorker`); nil otherwise, and once the build has been written.
    private var postingWorker: PostingWorker?
    /// Whether `setBit` gathers changes for the worker (`postingWorker` is not
    /// nil): a flag, so the hot path neither loads nor retains the worker.
    private var handsPostingsToWorker = false
    /// Bit changes gathered for the worker, handed over `PostingWorker.batch` at a time.
    private var pendingPostings: [PostingWorker.Change] = []
    /// Subscriptions the topic chunks made at the build's write will hold (while the worker is there).
    private var buildSubscriptions = 0
    /// What the topic chunks of the build's first write are made of (`adoptPostingWorker`),
    /// kept until the write commits, so a write that is redone makes them again.
    private var inversionInput: InvertedChunks.Input?
    /// How many of those chunks' slices the topics' slice lists took (once, for a redone write too).
    private var invertedSlicesApplied = 0

    private func handPostingsOver() {
        guard let postingWorker, !pendingPostings.isEmpty else { return }
        postingWorker.enqueue(pendingPostings)
        pendingPostings = []
        pendingPostings.reserveCapacity(PostingWorker.batch)
    }

    /// Everything gathered handed over and applied: the worker's state may be read.
    private func drainPostingWorker(_ worker: PostingWorker) {
        handPostingsOver()
        worker.drain()
    }

    /// Starts a batch on top of what `txn` holds, forgetting anything cached
    /// before: another transaction (or process) may have changed the tables since.
    ///
    /// The caches survive only when `txn` directly follows this writer's own
    /// last committed transaction (LMDB numbers write transactions), so nothing
    /// else can have written in between: then `all` and other hot containers
    /// stay decoded from one batch to the next.
    public func begin(_ txn: borrowing Transaction) throws {
        if let build {
            // Nothing else writes the target, and nothing is written before
            // `writeBuild`: the caches are the truth across transactions.
            if !build.begun {
                appliedSequence = try tables.appliedSequence(txn)
                topicLayout = try tables.topicLayout(txn)
                codeOrder = try tables.topicCodeOrder(txn)
                build.begun = true
                if build.targetIsEmpty { directory.startEmpty() } else { try directory.load(tables, txn) }
            }
            return
        }
        if let last = lastCommittedTransaction, txn.id == last + 1 {
            // Still the truth: every cached value was flushed and committed.
        } else {
            clearCaches()
        }
        lastCommittedTransaction = nil
        storedTops = [:]
        lastCodeKey = GreatestKey()
        appliedSequence = try tables.appliedSequence(txn)
        topicLayout = try tables.topicLayout(txn)
        codeOrder = try tables.topicCodeOrder(txn)
        startedOnStamp = try tables.writerStamp(txn)
        journalDevices.removeAll(keepingCapacity: true)
        transactionDevices.removeAll()
        let sync = try directory.sync(tables, txn)
        if case .loaded = sync { deviceIndexLoads += 1 }
        recipientChanges.removeAll()
        transactionStart = appliedSequence
        topicChanges.removeAll(keepingCapacity: true)
        topicSliceChanges.removeAll(keepingCapacity: true)
        liveSliceChanges.removeAll(keepingCapacity: true)
        topicCache?.beginWrite(at: appliedSequence, snapshot: Self.snapshot(of: txn))
        if let cache = recipientCache, cache.heldSequence != appliedSequence {
            // Others wrote: take the device records their journal lists, or (the first
            // write, or a gap in the journal) read the table again.
            if case .followed(let from, let entries)? = sync, cache.heldSequence == from.sequence {
                try follow(entries, in: cache, from: from.sequence, txn)
            } else {
                try cache.fill(from: tables, through: appliedSequence, txn)
                recipientCacheFills += 1
            }
        }
    }

    /// Brings `cache`, at sequence `from`, to what `txn` holds: the device records
    /// that other writers' transactions (`entries`) wrote or deleted, read from `txn`.
    private func follow(_ entries: [WriterJournal.Entry], in cache: RecipientCache, from: UInt64,
                        _ txn: borrowing Transaction) throws {
        let through = try tables.appliedSequence(txn)
        var keys = entries.flatMap(\.devices)
        keys.sort()
        var changes = RecipientCache.Changes()
        var previous: UInt64?
        for key in keys where key != previous {
            previous = key
            let pid = UInt32(truncatingIfNeeded: key >> 32), ordinal = UInt32(truncatingIfNeeded: key)
            // Marked as changed at `through`: a reader of an earlier snapshot reads it from the snapshot.
            if let v = try txn.get(tables.devices, Keys.pair(pid, ordinal)) {
                changes.put(pid, ordinal, sequence: through, record: v)
            } else {
                changes.delete(pid, ordinal, sequence: through)
            }
        }
        cache.apply(changes, from: from, through: through)
    }

    /// Takes over what the writer of another file generation holding the same
    /// projections keeps in memory — its device indexes and recipient cache —
    /// instead of reading them again: `previousTxn` sees that generation (retired:
    /// nothing writes it any more), `txn` this one. False (nothing taken) unless
    /// both hold the same sequence and as many devices, and `previous` can tell
    /// what it holds without reading the table itself.
    public func adoptState(of previous: ProjectionWriter, _ previousTxn: borrowing Transaction,
                           _ txn: borrowing Transaction) throws -> Bool {
        guard build == nil, previous.build == nil, !directory.isLoaded else { return false }
        let sequence = try tables.appliedSequence(txn)
        guard try previous.tables.appliedSequence(previousTxn) == sequence,
              try previousTxn.statistics(previous.tables.devices).entries == txn.statistics(tables.devices).entries,
              let sync = try previous.directory.sync(previous.tables, previousTxn, reading: false) else { return false }
        directory.adopt(previous.directory, at: DeviceDirectory.State(stamp: try tables.writerStamp(txn), sequence: sequence))
        if let mine = recipientCache, let theirs = previous.recipientCache {
            if case .followed(let from, let entries) = sync, theirs.heldSequence == from.sequence {
                try previous.follow(entries, in: theirs, from: from.sequence, previousTxn)
            }
            if theirs.heldSequence == sequence { mine.take(from: theirs) }
        }
        topicCache?.beginWrite(at: sequence, snapshot: Self.snapshot(of: txn))
        return directory.isLoaded
    }

    /// Loads the device_id and token indexes now (in any transaction, a read one will do),
    /// so the first write does not wait for it: a store opened for writing calls it.
    ///
    /// Given `environment`, the recipient cache (when there is one to fill) is
    /// read on a second thread at the same time, in its own read transaction
    /// on the same snapshot: both walk every device record, 4–5 s each at 10M
    /// devices. Another process may commit between the two transactions; the
    /// second one then sees a later snapshot (another transaction id), and the
    /// cache is read here afterwards instead, from `txn`.
    public func prepare(_ txn: borrowing Transaction, alongside environment: Environment? = nil) throws {
        // Readers may fill the topic directory from now on (changes are reported from here).
        if build == nil, let topics = topicCache {
            topics.beginWrite(at: try tables.appliedSequence(txn), snapshot: Self.snapshot(of: txn))
        }
        let loadsDirectory = build == nil && !directory.isLoaded
        let cache = recipientCache.flatMap { $0.heldSequence == nil ? $0 : nil }
        var filledBeside = false
        if loadsDirectory, let cache, let environment {
            let tables = self.tables
            let snapshot = txn.id
            let helper = HelperThread(name: "topicstore-recipient-cache") {
                try environment.read { other -> Bool in
                    guard other.id == snapshot else { return false }
                    try cache.fill(from: tables, through: tables.appliedSequence(other), other)
                    return true
                }
            }
            deviceIndexLoads += 1
            let loaded = Result { try directory.load(tables, txn) }
            // Joined before anything is thrown: the thread uses the cache. If it
            // failed (no reader slot left, say), the cache is read below as before;
            // a damaged record then fails there too.
            filledBeside = (try? helper.join()) ?? false
            try loaded.get()
        } else if loadsDirectory {
            deviceIndexLoads += 1
            try directory.load(tables, txn)
        }
        if cache != nil { recipientCacheFills += 1 }
        if let cache, !filledBeside { try cache.fill(from: tables, through: tables.appliedSequence(txn), txn) }
    }

    /// Tells the writer that the transaction it flushed into committed.
    /// The recipient cache is brought up first: the topic directory's report
    /// lets readers without a transaction ask both for the new snapshot.
    public func didCommit(transactionID: Int) {
        lastCommittedTransaction = transactionID
        if let cache = recipientCache {
            cache.apply(recipientChanges, from: transactionStart, through: appliedSequence)
            recipientChanges.removeAll()
        }
        if let cache = topicCache {
            // It holds what the members of small topics reach: the devices whose records the
            // transaction wrote, as listed for its journal entry, drop the entries holding them.
            cache.didCommit(changing: topicChanges, topicSlices: topicSliceChanges, liveSlices: liveSliceChanges,
                            devices: journalDevices, from: transactionStart, through: appliedSequence, transaction: transactionID)
            topicChanges.removeAll(keepingCapacity: true)
            topicSliceChanges.removeAll(keepingCapacity: true)
            liveSliceChanges.removeAll(keepingCapacity: true)
        }
    }

    /// The committed snapshot `txn` reads, by LMDB transaction id: a write
    /// transaction's id is one past the snapshot it began on.
    static func snapshot(of txn: borrowing Transaction) -> Int {
        txn.isReadOnly ? txn.id : txn.id - 1
    }

    private var lastCommittedTransaction: Int?

    private func clearCaches() {
        storedTops = [:]
        lastCodeKey = GreatestKey()
        sliceChanges.removeAll()
        recentCodes.forgetAll()
        savedCounts = [:]
        projects.removeAll()
        topics.removeAll(); postings.removeAll(); memberships.removeAll()
        dirtyTopics = []; dirtyMemberships = []
        topicCodes.removeAll()
        nextProjectID = nil
    }

    // MARK: Projects

    func project(named name: String, create: Bool, _ txn: borrowing Transaction) throws -> ProjectRecord? {
        guard let build else { return try loadProject(named: name, create: create, txn) }
        // A build keeps the project of the last event at hand: events come in
        // runs of one project, and two SipHash lookups per event were 15% of the fold.
        if let b = unretainedBuild, let record = b._withUnsafeGuaranteedRef({ $0.currentRecord(ofProject: name) }) { return record }
        settleCurrentProject(build)
        let p = try loadProject(named: name, create: create, txn)
        if let p { build.setCurrentProject(name, p) }
        return p
    }

    /// Writes a build's project at hand back into the cache.
    private func settleCurrentProject(_ build: BuildState) {
        if let changed = build.takeChangedCurrentProject() {
            projects.set(changed.name, Cached(value: changed.record, dirty: true))
        }
    }

    private func loadProject(named name: String, create: Bool, _ txn: borrowing Transaction) throws -> ProjectRecord? {
        if let slot = projects.slot(of: name) { return projects[slot].value }
        if build?.targetIsEmpty != true, let v = try txn.get(tables.projects, Array(name.utf8)) {
            let p = try ProjectRecord(decoding: v, at: "projects/\(name)")
            // The live writer takes no damaged record on trust (a rebuild's target holds its own output).
            if build == nil { try tables.checkProject(p, named: name, txn) }
            projects.set(name, Cached(value: p, dirty: false))
            return p
        }
        guard create else { return nil }
        let p = ProjectRecord(id: try allocateProjectID(txn), nextOrdinal: 0, nextTopicID: ProjectionTables.firstTopicID)
        projects.set(name, Cached(value: p, dirty: true))
        return p
    }

    func update(project name: String, _ record: ProjectRecord) {
        if let b = unretainedBuild, b._withUnsafeGuaranteedRef({ $0.update(currentProject: name, record) }) { return }
        if let slot = projects.slot(of: name) {
            if projects[slot].value != record { projects[slot] = Cached(value: record, dirty: true) }
        } else {
            projects.set(name, Cached(value: record, dirty: true))
        }
    }

    private func allocateProjectID(_ txn: borrowing Transaction) throws -> UInt32 {
        var next: UInt32 = 1
        if let cached = nextProjectID { next = cached }
        else if let v = try txn.get(tables.meta, ProjectionTables.nextProjectKey), v.count == 4 { next = v.loadBigEndian(at: 0) }
        nextProjectID = next + 1
        return next
    }

    // MARK: Topics (by slot: look a topic up once, then read and change it in place)

    /// The cache slot of topic `tid`, loading it; nil when the topic does not exist.
    func topicSlot(_ pid: UInt32, _ tid: UInt32, _ txn: borrowing Transaction) throws -> Int? {
        let key = TopicKey(pid: pid, topic: tid)
        if let slot = cachedTopicSlot(key) { return slot }
        if build?.targetIsEmpty == true { return nil }
        guard let v = try Keys.withPair(pid, tid, { try txn.get(tables.topics, $0) }) else { return nil }
        var record = try TopicRecord(decoding: v, at: "topics/\(pid)/\(tid)")
        if PostingChunk.omitsNewest(tid, topicLayout) {
            // The cache holds every slice the topic occupies; the newest is left out only when stored.
            record.slices = try PostingChunk.withNewest(record.slices, pid: pid, topic: tid, top: storedTop(pid, txn),
                                                        tables: tables, txn)
        }
        if topicLayout == .compact {
            // Not stored: the count kept when the caches were last bounded, or counted from the
            // stored chunks. Either is the count before any change of this event (a topic's record
            // is loaded before its first change, or, by an unsubscribe, right after it, which the
            // count then applies; chunks are written only at flush).
            // Taken out: while the record is cached, its count is the truth.
            if let saved = savedCounts.removeValue(forKey: UInt64(pid) << 32 | UInt64(tid)) {
                record.subscribers = saved
            } else {
                record.subscribers = try PostingChunk.cardinality(pid: pid, topic: tid, slices: record.slices, tables: tables, txn)
            }
        }
        return addTopic(key, Cached(value: record, dirty: false))
    }

    /// The newest slice with a chunk of project `pid` in what `txn` holds
    /// (`PostingChunk.maxHigh`), which stored shared topic records leave out.
    private func storedTop(_ pid: UInt32, _ txn: borrowing Transaction) throws -> UInt16? {
        if let held = storedTops[pid] { return held }
        let top = try PostingChunk.maxHigh(pid: pid, tables: tables, txn)
        storedTops.updateValue(top, forKey: pid)
        return top
    }

    /// The newest slice of every project the caches hold, by pid: what the
    /// shared topic records written now leave out; and the pids of the
    /// projects changed since they were last written (only their newest slice can have moved on).
    private func newestSlices() -> (newest: [UInt32: UInt16], changed: [UInt32]) {
        var newest: [UInt32: UInt16] = [:]
        var changed: [UInt32] = []
        for slot in projects.indices {
            let p = projects[slot].value
            if let h = PostingChunk.newest(nextOrdinal: p.nextOrdinal) { newest[p.id] = h }
            if projects[slot].dirty { changed.append(p.id) }
        }
        return (newest, changed)
    }

    /// Settles the slice changes (`settleSliceChanges`) and lists the slice
    /// left behind where a changed project's newest slice moved on
    /// (`relistLeftSlice`, when `relists`); returns each project's newest
    /// slice, for `storedForm`. Before the projects are written (they are then clean).
    private func prepareTopicWrites(relists: Bool, _ txn: borrowing Transaction) throws -> [UInt32: UInt16] {
        let (newest, changed) = newestSlices()
        settleSliceChanges(newest)
        if relists, topicLayout == .compact {
            for pid in changed { if let h = newest[pid] { try relistLeftSlice(pid, newest: h, txn) } }
        }
        return newest
    }

    /// When project `pid`'s newest slice (`newest`) has moved on from the one
    /// the stored records leave out, the records of the shared topics with a
    /// chunk in the slice left behind must now list it: they are loaded (the
    /// cache holds every slice a topic occupies) and marked to be written.
    /// One walk of that slice's keys, once per 65,536 devices; the slices in
    /// between, if any, hold only chunks this transaction made, whose topics
    /// are written anyway.
    private func relistLeftSlice(_ pid: UInt32, newest: UInt16, _ txn: borrowing Transaction) throws {
        guard let left = try storedTop(pid, txn), left < newest else { return }
        var tids: [UInt32] = []
        try txn.withCursor(tables.postings) { cursor in
            var entry = try Keys.withChunk(pid, ProjectionTables.firstTopicID, left) { try cursor.seek(atLeast: $0) }
            while let (key, _) = entry, key.count == 10, key.loadBigEndian(at: 0, as: UInt32.self) == pid,
                  key.loadBigEndian(at: 4, as: UInt16.self) == left {
                let tid = key.loadBigEndian(at: 6, as: UInt32.self)
                guard PostingChunk.leavesNewestOut(tid) else { break }  // the single topics follow
                tids.append(tid)
                entry = try cursor.next()
            }
        }
        for tid in tids {
            guard let slot = try topicSlot(pid, tid, txn) else {
                throw ProjectionCorruption(place: "postings/\(pid)/\(left)/\(tid)", reason: "postings of a missing topic")
            }
            modifyTopic(at: slot) { _ in }
        }
    }

    /// Whether topic `key`'s record is stored without its last slice: when
    /// the topic leaves its project's newest slice out and that is its last.
    /// `newest` is what `prepareTopicWrites` found; the lookup is skipped
    /// while the topics come project by project (`newestOfProject`).
    private func omitsLastSlice(_ key: TopicKey, _ record: borrowing TopicRecord, newest: [UInt32: UInt16],
                                _ newestOfProject: inout (pid: UInt32, slice: UInt16?)?) throws -> Bool {
        guard PostingChunk.omitsNewest(key.topic, topicLayout), let last = record.slices.last else { return false }
        if newestOfProject?.pid != key.pid { newestOfProject = (key.pid, newest[key.pid]) }
        guard let h = newestOfProject?.slice else {
            throw ProjectionCorruption(place: "topics/\(key.pid)/\(key.topic)", reason: "a topic with postings in a project without devices")
        }
        return last == h
    }

    /// The slot of a topic the cache holds. A build finds it by topic id in an
    /// array (ids are dense): a million per-user topics made the hash table's
    /// probes cache misses, for the popular topics too.
    @inline(__always)
    private func cachedTopicSlot(_ key: TopicKey) -> Int? {
        if let b = unretainedBuild { return b._withUnsafeGuaranteedRef { $0.topicSlot(key.pid, key.topic) } }
        return topics.slot(of: key)
    }

    private func addTopic(_ key: TopicKey, _ value: consuming Cached<TopicRecord>) -> Int {
        guard let b = unretainedBuild else { return topics.insert(key, value) }
        let slot = topics.appendUnindexed(key, value)
        b._withUnsafeGuaranteedRef { $0.setTopicSlot(key.pid, key.topic, slot) }
        return slot
    }

    /// Creates topic `tid` with its code index entry; returns its slot.
    /// (`record` is taken: it goes into the cache without a copy.)
    func createTopic(_ pid: UInt32, _ tid: UInt32, _ record: consuming TopicRecord, _ txn: borrowing Transaction) throws -> Int {
        if withBuildCodes({ $0.set(pid, record.code, tid) }) == nil {
            // No build (the live path): the code goes to its table.
            let put: Void? = try Keys.withCode(pid, record.code, codeOrder) { k in
                // A new code mostly sorts last (a new device's per-user topic, `user.<n>`).
                try withUnsafeBytes(of: tid.bigEndian) { v in try txn.putProbablyLast(tables.topicCodes, k, v) }
                noteCodeKey(k)
            }
            // Validation keeps codes to 1…128 bytes, which every form holds.
            guard put != nil else { throw ProjectionCorruption(place: "topic_codes/\(pid)/\(record.code)", reason: "a code of \(record.code.utf8.count) bytes has no key") }
            // A build keeps its codes in `build.topicCodes`, which lookups ask first.
            topicCodes.set(pid, record.code, tid)
        }
        let slot = addTopic(TopicKey(pid: pid, topic: tid), Cached(value: record, dirty: true))
        if unretainedBuild == nil { dirtyTopics.append(slot) }
        return slot
    }

    /// Removes topic `tid` (which must have no members left): its record and its code.
    func dropTopic(_ pid: UInt32, _ tid: UInt32, code: String, _ txn: borrowing Transaction) throws {
        recentCodes.forgetAll()
        if let build {
            build.topicCodes.set(pid, code, nil)
        } else {
            if let key = Keys.code(pid, code, codeOrder) { try txn.delete(tables.topicCodes, key) }
        }
        topicCodes.set(pid, code, nil)
        if topicCache != nil { topicChanges.append(UInt64(pid) << 32 | UInt64(tid)) }
        if let slot = cachedTopicSlot(TopicKey(pid: pid, topic: tid)) {
            topics.values[slot].dirty = false
            topics.values[slot].value.subscribers = 0
            // Its last members' slice changes must not mark it for writing at flush.
            sliceChanges.removeAll { $0.slot == slot }
        }
        if let build { build.droppedTopics.append(TopicKey(pid: pid, topic: tid)) } else { try txn.delete(tables.topics, Keys.pair(pid, tid)) }
    }

    func topic(at slot: Int) -> TopicRecord { topics.values[slot].value }
    /// Whether the cached topic in `slot` has `title`, compared in place (`topic(at:)` copies the record).
    func topic(at slot: Int, hasTitle title: String) -> Bool { topics.values[slot].value.title == title }
    func topicIsSingle(at slot: Int) -> Bool { topics.values[slot].value.single }

    /// Changes the cached topic in `slot`; it is written back at flush.
    func modifyTopic<R>(at slot: Int, _ body: (inout TopicRecord) throws -> R) rethrows -> R {
        if !topics.values[slot].dirty {
            topics.values[slot].dirty = true
            if unretainedBuild == nil { dirtyTopics.append(slot) }
        }
        return try body(&topics.values[slot].value)
    }

    func topicID(_ pid: UInt32, code: String, _ txn: borrowing Transaction) throws -> UInt32? {
        if let tid = recentCodes.topicID(pid, code: code) { return tid }
        let tid = try lookupTopicID(pid, code: code, build: build, txn)
        if let tid { recentCodes.remember(pid, code: code, tid) }
        return tid
    }

    @inline(__always)
    private func lookupTopicID(_ pid: UInt32, code: String, build: BuildState?, _ txn: borrowing Transaction) throws -> UInt32? {
        if let held = withBuildCodes({ $0.lookup(pid, code) }) ?? nil { return held }
        if let held = topicCodes.lookup(pid, code), let id = held { return id }
        if build?.targetIsEmpty == true { return nil }
        guard let v = try Keys.withCode(pid, code, codeOrder, { k in
            try codeSortsLast(k, txn) ? nil : try txn.get(tables.topicCodes, k)
        }) ?? nil else { return nil }
        guard v.count == 4 else { throw ProjectionCorruption(place: "topic_codes/\(pid)/\(code)", reason: "\(v.count) bytes") }
        let id: UInt32 = v.loadBigEndian(at: 0)
        topicCodes.set(pid, code, id)
        return id
    }

    /// Whether `key` sorts after every key of `topic_codes` (so the code is
    /// not there), on the live path: a new device's per-user topic (`user.<n>`)
    /// mostly does, and was a B-tree search for nothing, like its chunk.
    private func codeSortsLast(_ key: UnsafeRawBufferPointer, _ txn: borrowing Transaction) throws -> Bool {
        guard build == nil else { return false }
        if !lastCodeKey.read {
            lastCodeKey.read = true
            try txn.withCursor(tables.topicCodes) { cursor in
                if let last = try cursor.last() { lastCodeKey.raise(to: last.key) }
            }
        }
        return lastCodeKey.precedes(key)
    }

    /// Notes that `key` is now in `topic_codes` (`codeSortsLast`).
    private func noteCodeKey(_ key: UnsafeRawBufferPointer) {
        if lastCodeKey.read { lastCodeKey.raise(to: key) }
    }

    // MARK: Devices

    /// The device of `deviceID`.
    func ordinal(_ pid: UInt32, deviceID: NameText, _ txn: borrowing Transaction) throws -> UInt32? {
        try ordinal(pid, with: .deviceID, deviceID, txn)
    }

    /// The device holding `token` (live or rejected).
    func ordinal(_ pid: UInt32, token: NameText, _ txn: borrowing Transaction) throws -> UInt32? {
        try ordinal(pid, with: .token, token, txn)
    }

    /// `ordinal(_:deviceID:_:)` of a String. The lookup is not remembered
    /// (`LookedUpName`): a small string's text is a copy on the stack, whose
    /// place another name may take after the call.
    func ordinal(_ pid: UInt32, deviceID: String, _ txn: borrowing Transaction) throws -> UInt32? {
        defer { lookedUp.0 = nil }
        return try deviceID.withUTF8Bytes { try ordinal(pid, with: .deviceID, NameText($0), txn) }
    }

    /// `ordinal(_:token:_:)` of a String, not remembered either.
    func ordinal(_ pid: UInt32, token: String, _ txn: borrowing Transaction) throws -> UInt32? {
        defer { lookedUp.1 = nil }
        return try token.withUTF8Bytes { try ordinal(pid, with: .token, NameText($0), txn) }
    }

    /// The device with `value` as its device_id or token, from the writer's
    /// index, each candidate confirmed by its record.
    private func ordinal(_ pid: UInt32, with name: DeviceDirectory.Name, _ value: NameText,
                         _ txn: borrowing Transaction) throws -> UInt32? {
        let hash: UInt64
        let hinted = name == .deviceID ? hintedDeviceIDHash : hintedTokenHash
        if hinted != 0 {
            assert(hinted == NameIndex.nameHash(value.utf8), "the hint of \(name) \(value.string) is another name's")
            hash = OrdinalIndex.hash(pid, nameHash: hinted)
            if name == .deviceID { hintedDeviceIDHash = 0 } else { hintedTokenHash = 0 }
        } else {
            hash = OrdinalIndex.hash(pid, value.utf8)
        }
        let looked = LookedUpName(pid: pid, text: value.utf8.baseAddress, count: value.utf8.count, hash: hash)
        if name == .deviceID { lookedUp.0 = looked } else { lookedUp.1 = looked }
        var slot = directory.firstSlot(name, hash)
        while let candidate = directory.nextCandidate(name, pid, hash, slot: &slot) {
            if try device(pid, candidate, matches: name, value, txn) { return candidate }
        }
        return nil
    }

    /// Whether device `ordinal` has `value` as its device_id or its token
    /// (live or rejected), compared where the record is (in the build, or in
    /// the map), without decoding or copying it.
    private func device(_ pid: UInt32, _ ordinal: UInt32, matches name: DeviceDirectory.Name, _ value: NameText,
                        _ txn: borrowing Transaction) throws -> Bool {
        if let b = unretainedBuild {
            if let held = withBuildDevices({ $0.device(pid, ordinal, matches: name, value) }) ?? nil { return held }
            if b._withUnsafeGuaranteedRef({ $0.targetIsEmpty }) { throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)", reason: "indexed device is missing") }
        }
        let matches = try withStoredDevice(pid, ordinal, txn) { v -> Bool? in
            guard let f = DeviceRecord.fields(of: v) else { return nil }
            return name == .deviceID ? f.has(deviceID: value.utf8) : f.holds(value.utf8)
        }
        guard let matches else {
            throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)", reason: "indexed device is missing")
        }
        guard let matches else {
            throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)", reason: "device record does not decode")
        }
        return matches
    }

    /// Calls `body` with device `ordinal`'s stored record, nil when there is none.
    /// The live writer takes it from the records its transaction wrote or read
    /// (`TransactionDevices`), else from the table, and keeps what it read there.
    /// A build has its own (`BuildState`); what it reads from a target it writes
    /// in rounds is not kept, since a round changes the table under it.
    private func withStoredDevice<R>(_ pid: UInt32, _ ordinal: UInt32, _ txn: borrowing Transaction,
                                     _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
        if build == nil, let held = try transactionDevices.withRecord(pid, ordinal, body) { return held }
        guard let v = try Keys.withPair(pid, ordinal, { try txn.get(tables.devices, $0) }) else { return nil }
        if build == nil { transactionDevices.set(pid, ordinal, v) }
        return try body(v)
    }

    /// Records that device `ordinal` (new) has `deviceID`.
    func indexDevice(_ pid: UInt32, _ deviceID: NameText, ordinal: UInt32) {
        directory.insert(.deviceID, pid, hash: hash(.deviceID, pid, deviceID), ordinal: ordinal)
    }

    /// Records that device `ordinal` (forgotten) no longer has `deviceID`.
    func unindexDevice(_ pid: UInt32, _ deviceID: NameText, ordinal: UInt32) {
        directory.remove(.deviceID, pid, hash: hash(.deviceID, pid, deviceID), ordinal: ordinal)
    }

    /// Records that device `ordinal` now holds `token` (its previous holder must have been removed).
    func indexToken(_ pid: UInt32, _ token: NameText, ordinal: UInt32) {
        directory.insert(.token, pid, hash: hash(.token, pid, token), ordinal: ordinal)
    }

    /// Records that device `ordinal` no longer holds `token`.
    func unindexToken(_ pid: UInt32, _ token: NameText, ordinal: UInt32) {
        directory.remove(.token, pid, hash: hash(.token, pid, token), ordinal: ordinal)
    }

    /// `unindexToken` of the token whose `OrdinalIndex.hash` is `hash` (`HeldToken`).
    func unindexToken(_ pid: UInt32, hash: UInt64, ordinal: UInt32) {
        directory.remove(.token, pid, hash: hash, ordinal: ordinal)
    }

    /// The name the event's last lookup of a device_id or of a token looked
    /// for: its project, where its text is and its `OrdinalIndex.hash`.
    /// The fold files or unfiles a device under the name it has just looked
    /// up (a new device's device_id, a token that moves), which hashed the
    /// name a second time: 36 bytes for an SDK's device_id, 64 or 163 for a
    /// token (2% of a rebuild's folding thread, callgrind). Cleared at every
    /// event (`advance`), so a name is recognised only while the event that
    /// looked it up holds it.
    private struct LookedUpName {
        var pid: UInt32
        /// The text's place, not its bytes: the event holds it there while it is folded.
        var text: UnsafeRawPointer?
        var count: Int
        var hash: UInt64
    }
    private var lookedUp: (LookedUpName?, LookedUpName?) = (nil, nil)

    /// `OrdinalIndex.hash(pid, value)`, from the last lookup of that kind when it was of this very text.
    @inline(__always)
    private func hash(_ name: DeviceDirectory.Name, _ pid: UInt32, _ value: NameText) -> UInt64 {
        if let last = name == .deviceID ? lookedUp.0 : lookedUp.1, last.pid == pid,
           last.text == value.utf8.baseAddress, last.count == value.utf8.count {
            assert(last.hash == OrdinalIndex.hash(pid, value.utf8), "the hash kept for \(value.string) is another name's")
            return last.hash
        }
        return OrdinalIndex.hash(pid, value.utf8)
    }

    func device(_ pid: UInt32, _ ordinal: UInt32, _ txn: borrowing Transaction) throws -> DeviceRecord {
        if let build, let held = try build.device(pid, ordinal) {
            guard let device = held else {
                throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)", reason: "indexed device was deleted")
            }
            return device
        }
        guard build?.targetIsEmpty != true,
              let device = try withStoredDevice(pid, ordinal, txn, { try DeviceRecord(decoding: $0, at: "devices/\(pid)/\(ordinal)") }) else {
            throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)", reason: "indexed device is missing")
        }
        return device
    }

    /// Gives device `ordinal` `token` on `platform` from `tokenTime`, with no
    /// rejection, keeping its device_id, and returns what it held before
    /// (the fold's token change, whose rules take it from there). A build
    /// changes the record's bytes where it holds them (`BuildDevices.replaceToken`).
    func replaceToken(_ pid: UInt32, _ ordinal: UInt32, with token: NameText, platform: Platform, tokenTime: Int64,
                      _ txn: borrowing Transaction) throws -> HeldToken {
        if let replaced = try withBuildDevices({ try $0.replaceToken(pid, ordinal, with: token, platform: platform, tokenTime: tokenTime) }) ?? nil {
            guard let held = replaced else {
                throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)", reason: "indexed device was deleted")
            }
            return held
        }
        var device = try self.device(pid, ordinal, txn)
        var held = HeldToken(platform: device.platform, live: device.state == .live, token: .none)
        if let old = device.token {
            held.token = token.equals(old) ? .same : .other(hash: OrdinalIndex.hash(pid, old))
        }
        device.token = token.string
        device.platform = platform
        device.tokenTime = tokenTime
        device.rejectedAt = nil
        try put(device: device, pid, ordinal, txn)
        return held
    }

    /// Device `ordinal`'s token as a rejection of `token` weighs it, read
    /// where the record is (no `DeviceRecord`, whose names would be made into
    /// strings and freed): whether it holds `token`, since when, whether that
    /// is rejected already, and its platform.
    func tokenStanding(_ pid: UInt32, _ ordinal: UInt32, of token: NameText, _ txn: borrowing Transaction) throws -> TokenStanding {
        func standing(_ b: UnsafeRawBufferPointer?) throws -> TokenStanding {
            guard let b else {
                throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)", reason: "indexed device was deleted")
            }
            guard let f = DeviceRecord.fields(of: b), f.platform == 0 || Platform(rawValue: f.platform) != nil else {
                throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)", reason: "device record does not decode")
            }
            return TokenStanding(holds: f.holds(token.utf8), rejected: f.rejectedAt != nil,
                                 tokenTime: f.tokenTime, platform: Platform(rawValue: f.platform))
        }
        if let held = try withBuildDevices({ try $0.withRecord(pid, ordinal, standing) }) ?? nil { return held }
        guard build?.targetIsEmpty != true, let held = try withStoredDevice(pid, ordinal, txn, standing) else {
            throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)", reason: "indexed device is missing")
        }
        return held
    }

    /// Marks device `ordinal`'s token rejected at `rejectedAt` (the fold's
    /// token rejection, which decides whether it is); a build does it to the
    /// record's bytes (`BuildDevices.markRejected`).
    func markRejected(_ pid: UInt32, _ ordinal: UInt32, at rejectedAt: Int64, _ txn: borrowing Transaction) throws {
        switch withBuildDevices({ $0.markRejected(pid, ordinal, at: rejectedAt) }) ?? nil {
        case true?: return
        case false?: throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)", reason: "indexed device was deleted")
        case nil:
            var device = try self.device(pid, ordinal, txn)
            device.rejectedAt = rejectedAt
            try put(device: device, pid, ordinal, txn)
        }
    }

    func deleteDevice(_ pid: UInt32, _ ordinal: UInt32, _ txn: borrowing Transaction) throws {
        if withBuildDevices({ $0.put(nil, pid, ordinal) }) != nil { return }
        try txn.delete(tables.devices, Keys.pair(pid, ordinal))
        transactionDevices.remove(pid, ordinal)
        journalDevices.append(UInt64(pid) << 32 | UInt64(ordinal))
        if recipientCache != nil { recipientChanges.delete(pid, ordinal, sequence: appliedSequence) }
    }

    /// Puts the record of a device with a live token and no rejection: in a
    /// build, written from the names where they are (a `DeviceRecord` holding
    /// them retained and released both).
    func putDevice(deviceID: NameText, token: NameText, platform: Platform, tokenTime: Int64,
                   _ pid: UInt32, _ ordinal: UInt32, _ txn: borrowing Transaction) throws {
        if withBuildDevices({ $0.put(deviceID: deviceID, token: token, platform: platform, tokenTime: tokenTime, pid, ordinal) }) != nil { return }
        // A new device has its project's newest ordinal: its key mostly sorts last.
        try put(device: DeviceRecord(deviceID: deviceID.string, token: token.string, platform: platform, tokenTime: tokenTime, rejectedAt: nil),
                pid, ordinal, txn, probablyLast: true)
    }

    func put(device: consuming DeviceRecord, _ pid: UInt32, _ ordinal: UInt32, _ txn: borrowing Transaction,
             probablyLast: Bool = false) throws {
        if withBuildDevices({ $0.put(device, pid, ordinal) }) != nil { return }
        // Encoded into a buffer the writer keeps: an array per record was an
        // allocation and a release for every device written.
        let size = device.maximumEncodedSize
        if deviceBuffer.count < size { deviceBuffer = [UInt8](repeating: 0, count: max(size, 2 * deviceBuffer.count)) }
        try deviceBuffer.withUnsafeMutableBytes { buffer in
            let v = UnsafeRawBufferPointer(rebasing: buffer[0..<device.encode(into: buffer.baseAddress!)])
            try Keys.withPair(pid, ordinal) { k in
                if probablyLast { try txn.putProbablyLast(tables.devices, k, v) } else { try txn.put(tables.devices, k, v) }
            }
            transactionDevices.set(pid, ordinal, v)
            if recipientCache != nil { recipientChanges.put(pid, ordinal, sequence: appliedSequence, record: v) }
        }
        journalDevices.append(UInt64(pid) << 32 | UInt64(ordinal))
    }

    // MARK: Memberships (device → topics and topic → devices, kept together)

    /// The cache slot of a device's topic list, loading it.
    func membershipSlot(_ pid: UInt32, _ ordinal: UInt32, _ txn: borrowing Transaction) throws -> Int {
        let key = DeviceKey(pid: pid, ordinal: ordinal)
        if let build {
            // A build finds its slots by ordinal (`BuildState.memberSlot`), not by hash.
            if let slot = build.memberSlot(pid, ordinal) { return slot }
            var list: [UInt32]
            if build.targetIsEmpty {
                list = []  // a register makes room for its topics (`reserveTopics`)
            } else {
                list = try ProjectionReader.memberships(pid, ordinal, tables: tables, txn)
            }
            let slot = memberships.appendUnindexed(key, list)
            build.setMemberSlot(pid, ordinal, slot)
            return slot
        }
        if let slot = memberships.slot(of: key) { return slot }
        let list = try ProjectionReader.memberships(pid, ordinal, tables: tables, txn)
        return memberships.insert(key, list)
    }

    /// A new device has no topics: no need to look.
    func newMembershipSlot(_ pid: UInt32, _ ordinal: UInt32) -> Int {
        let key = DeviceKey(pid: pid, ordinal: ordinal)
        // (Empty, with no room: a register makes room for its topics, `reserveTopics`.)
        if let b = unretainedBuild {
            let slot = memberships.appendUnindexed(key, [])
            b._withUnsafeGuaranteedRef { $0.setMemberSlot(pid, ordinal, slot) }
            return slot
        }
        return memberships.insert(key, [])
    }

    func topicIDs(at slot: Int) -> [UInt32] { memberships.list(at: slot) }

    /// Makes room in the topic list in `slot` for `extra` more topics (a
    /// register's), at least doubling it: grown one subscription at a time
    /// from empty, a new device's list was reallocated two or three times
    /// (~430 instructions each, callgrind of a rebuild).
    func reserveTopics(_ slot: Int, _ extra: Int) {
        memberships.reserveRoom(at: slot, for: extra)
    }

    /// Adds topic `tid` to the device in `slot` (and the device to the topic's
    /// bitmap); returns false when it was already there.
    func subscribe(_ slot: Int, _ tid: UInt32, _ txn: borrowing Transaction) throws -> Bool {
        guard memberships.insert(tid, intoListAt: slot) else { return false }
        markMembershipDirty(slot)
        let key = memberships.key(at: slot)
        try setBit(key.pid, tid, key.ordinal, true, txn)
        return true
    }

    /// Removes topic `tid` from the device in `slot`; returns false when it was not there.
    func unsubscribe(_ slot: Int, _ tid: UInt32, _ txn: borrowing Transaction) throws -> Bool {
        guard memberships.remove(tid, fromListAt: slot) else { return false }
        markMembershipDirty(slot)
        let key = memberships.key(at: slot)
        try setBit(key.pid, tid, key.ordinal, false, txn)
        return true
    }

    @inline(__always)
    private func markMembershipDirty(_ slot: Int) {
        if !memberships.setDirty(slot, true), unretainedBuild == nil { dirtyMemberships.append(slot) }
    }

    /// Sets or clears one device's bit in a topic's (or built-in set's) bitmap.
    ///
    /// Inlined for a build's topics, which only count (a call for that was ~36
    /// instructions of each subscription the fold makes, callgrind).
    @inline(__always)
    func setBit(_ pid: UInt32, _ tid: UInt32, _ ordinal: UInt32, _ on: Bool, _ txn: borrowing Transaction) throws {
        // A topic's chunks are made from the devices' lists when the build is written (`adoptPostingWorker`).
        if handsPostingsToWorker && tid >= ProjectionTables.firstTopicID {
            buildSubscriptions += on ? 1 : -1
            return
        }
        try changeBit(pid, tid, ordinal, on, txn)
    }

    /// What `setBit` does for every bit but a build's topic's: a built-in set's
    /// change handed to the posting worker, or a chunk changed in the cache.
    @inline(never)
    private func changeBit(_ pid: UInt32, _ tid: UInt32, _ ordinal: UInt32, _ on: Bool, _ txn: borrowing Transaction) throws {
        if handsPostingsToWorker {
            pendingPostings.append(PostingWorker.Change(pid: pid, tid: tid, ordinal: ordinal, on: on))
            if pendingPostings.count == PostingWorker.batch { handPostingsOver() }
            return
        }
        let stored = build?.targetIsEmpty != true
        let (_, slice) = try postings.set(pid, tid, ordinal, on) { key in
            guard stored else { return nil }
            // A cached topic's record lists every slice the topic has a chunk in (stored, or
            // cached since): none in another, as in any slice of a topic created since the
            // last commit (a new device's per-user topic), whose chunk was a B-tree search for nothing.
            if tid >= ProjectionTables.firstTopicID, let topic = cachedTopicSlot(TopicKey(pid: pid, topic: tid)),
               !topics.values[topic].value.slices.contains(key.high) {
                return nil
            }
            guard let v = try Keys.withChunk(pid, tid, key.high, { try txn.get(tables.postings, $0) }) else { return nil }
            return PostingSet(try PostingChunk.decode(v, pid: pid, topic: tid, high: key.high))
        }
        // A slice that appears or empties changes the topic's slice list.
        guard let slice, tid >= ProjectionTables.firstTopicID else { return }
        guard let topic = try topicSlot(pid, tid, txn) else {
            throw ProjectionCorruption(place: "topics/\(pid)/\(tid)", reason: "postings of a missing topic")
        }
        let high = PostingChunk.high(ordinal)
        if PostingChunk.omitsNewest(tid, topicLayout) {
            // Whether the stored record changes depends on the newest slice at flush (`settleSliceChanges`).
            slice.apply(high, to: &topics.values[topic].value.slices)
            sliceChanges.append(SliceChange(slot: topic, high: high))
        } else {
            modifyTopic(at: topic) { slice.apply(high, to: &$0.slices) }
        }
    }

    /// A slice that appeared in or left a shared topic's list (`setBit`), not yet written.
    struct SliceChange {
        var slot: Int
        var high: UInt16
    }

    /// Marks for writing the shared topics whose stored record a slice change
    /// of theirs changes: one in any slice but the newest one at flush (a
    /// record does not list that one, so joining or leaving it changes
    /// nothing stored, which is what spares the records' pages while the
    /// newest slice fills).
    private func settleSliceChanges(_ newest: [UInt32: UInt16]) {
        for change in sliceChanges where newest[topics.keys[change.slot].pid] != change.high {
            modifyTopic(at: change.slot) { _ in }
        }
        sliceChanges.removeAll(keepingCapacity: true)
    }

    // MARK: Prefetch (build mode)

    /// Names an event will make the fold look up, hashed ahead of it by the
    /// thread that reads the log (`prefetch(_:)` takes them a few events early).
    public enum FoldHints {
        /// Appends `event`'s hints to `hints`: the hash of its device_id, of
        /// its token (0 for none), then of each topic code.
        /// (Each name is hashed where the event holds it: taking the device_id
        /// through `EventBody.deviceID` and each spec out of its array copied
        /// them, a retain and a release per string.)
        public static func append(_ event: borrowing FoldBody, to hints: inout [UInt64]) {
            switch event {
            case .token(let deviceID, let token, _):
                hints.append(NameIndex.nameHash(deviceID.utf8)); hints.append(NameIndex.nameHash(token.utf8))
            case .tokenRejected(let token, _, _), .expireToken(let token):
                hints.append(0); hints.append(NameIndex.nameHash(token.utf8))
            case .register(let deviceID, let specs):
                hints.append(NameIndex.nameHash(deviceID.utf8)); hints.append(0)
                for i in specs.indices { hints.append(NameIndex.nameHash(specs[i].code)) }
            case .unregister(let deviceID, let codes):
                hints.append(NameIndex.nameHash(deviceID.utf8)); hints.append(0)
                for i in codes.indices { hints.append(NameIndex.nameHash(codes[i])) }
            case .dropTopic(let code):
                hints.append(0); hints.append(0); hints.append(NameIndex.nameHash(code))
            case .unregisterAll(let deviceID), .forgetDevice(let deviceID):
                hints.append(NameIndex.nameHash(deviceID.utf8)); hints.append(0)
            }
        }
    }

    /// The `FoldHints` of consecutive events: `hints` holds every event's
    /// back to back, event k's ending at `ends[k]` (an offset into `hints`).
    public struct FoldHintRun {
        let hints: UnsafeBufferPointer<UInt64>
        let ends: UnsafeBufferPointer<Int>
        let events: Range<Int>

        public init(hints: UnsafeBufferPointer<UInt64>, ends: UnsafeBufferPointer<Int>, events: Range<Int>) {
            precondition(events.upperBound <= ends.count && (events.isEmpty || ends[events.upperBound - 1] <= hints.count))
            self.hints = hints
            self.ends = ends
            self.events = events
        }

        var isEmpty: Bool { events.isEmpty }

        /// Calls `body` with each event's hints (at least two: its device_id and token).
        @inline(__always)
        func forEach(_ body: (UnsafeBufferPointer<UInt64>) -> Void) {
            for k in events {
                let start = k == 0 ? 0 : ends[k - 1]
                let event = UnsafeBufferPointer(rebasing: hints[start..<ends[k]])
                if event.count >= 2 { body(event) }
            }
        }
    }

    /// The name hashes of the device_id and the token of the event about to be
    /// folded, from its `FoldHints` (hashed by the thread that read the log):
    /// each is taken by the one lookup of that name the event makes, which
    /// hashed the name again (2% of a rebuild's fold thread). 0: hash it here.
    private var hintedDeviceIDHash: UInt64 = 0
    private var hintedTokenHash: UInt64 = 0

    /// Hands the fold the `FoldHints` of the event it folds next (a build only):
    /// `hints` must be that event's, or its lookups go wrong.
    public func takeHints(_ hints: UnsafeBufferPointer<UInt64>) {
        guard build != nil, hints.count >= 2 else { return }
        hintedDeviceIDHash = hints[0]
        hintedTokenHash = hints[1]
    }

    /// Starts loading the hash-table slots the lookups of a few events ahead
    /// will probe (their `FoldHints`): called that far ahead, the lookups then
    /// find them in the cache instead of waiting on memory, which was most of
    /// their time in a rebuild of a million devices. A build only; the
    /// project is the one of the events just folded (a hint is only a hint).
    ///
    /// Several events at a time: each call takes each table's storage (and
    /// the build) once, a retain and a release each, which per event were
    /// three and a half pairs.
    public func prefetch(_ events: FoldHintRun) {
        guard let build, let pid = build.currentProjectID, !events.isEmpty else { return }
        directory.ids.prefetch(pid: pid, hintAt: 0, of: events)
        directory.tokens.prefetch(pid: pid, hintAt: 1, of: events)
        build.topicCodes.prefetch(pid, hintsFrom: 2, of: events)
    }

    // MARK: Sequence

    func advance(to sequence: UInt64) throws {
        guard sequence == appliedSequence + 1 else {
            throw FoldError.outOfOrder(expected: appliedSequence + 1, got: sequence)
        }
        appliedSequence = sequence
        lookedUp = (nil, nil)
    }

    /// Writes every cached change into the transaction. The caches stay valid
    /// for further events in the same transaction.
    public func flush(_ txn: borrowing Transaction) throws {
        if build != nil { return }  // a build is written by `writeBuild`
        let newest = try prepareTopicWrites(relists: true, txn)
        for slot in projects.indices where projects[slot].dirty {
            try txn.put(tables.projects, Array(projects.names[slot].utf8), projects[slot].value.encoded())
            projects[slot].dirty = false
        }
        if let next = nextProjectID {
            var w = ByteWriter(capacity: 4); w.u32(next)
            try txn.put(tables.meta, ProjectionTables.nextProjectKey, w.bytes)
        }
        // Each table's changes go in key order through one cursor: consecutive
        // keys mostly share a leaf page, which the cursor stays on instead of
        // searching the tree from its root for every key (the slots are in
        // hash order; sorting a batch's few thousand is cheap by comparison).
        let topicSlots = Self.inKeyOrder(dirtyTopics) { topics.keys[$0].packed }
        var newestOfProject: (pid: UInt32, slice: UInt16?)? = nil
        let storingCount = topicLayout == .legacy
        try txn.withCursor(tables.topics) { cursor in
            for slot in topicSlots where topics.values[slot].dirty {  // (a slot listed twice goes once)
                let key = topics.keys[slot]
                if topicCache != nil { topicChanges.append(UInt64(key.pid) << 32 | UInt64(key.topic)) }
                let omits = try omitsLastSlice(key, topics.values[slot].value, newest: newest, &newestOfProject)
                topics.values[slot].dirty = false
                // Encoded into the space the put reserves: not into an array allocated for each record.
                let size = topics.values[slot].value.encodedSize(storingCount: storingCount, omittingLastSlice: omits)
                try Keys.withPair(key.pid, key.topic) { k in
                    try cursor.put(k, reserving: size) { v in
                        let written = topics.values[slot].value.encode(into: v.baseAddress!, storingCount: storingCount,
                                                                        omittingLastSlice: omits)
                        precondition(written == size, "a topic record's size")
                    }
                }
            }
        }
        let chunkSlots = postings.sortedDirtySlots()
        try txn.withCursor(tables.postings) { cursor in
            for slot in chunkSlots where postings.chunks.values[slot].dirty {
                let key = postings.chunks.keys[slot]
                if topicCache != nil {
                    if key.topic >= ProjectionTables.firstTopicID {
                        let topic = UInt64(key.pid) << 32 | UInt64(key.topic)
                        // A topic that leaves the slice is placed elsewhere: dropped whole.
                        if postings.chunks.values[slot].value.isEmpty {
                            topicChanges.append(topic)
                        } else {
                            topicSliceChanges.append(TopicCache.ChangedSlice(topic: topic, high: key.high))
                        }
                    } else if key.topic == ProjectionTables.BuiltIn.liveIOS || key.topic == ProjectionTables.BuiltIn.liveAndroid {
                        liveSliceChanges.append(UInt64(key.pid) << 32 | UInt64(key.high))
                    }
                }
                postings.chunks.values[slot].dirty = false
                try Keys.withChunk(key.pid, key.topic, key.high) { k in
                    if postings.chunks.values[slot].value.isEmpty {
                        try cursor.delete(k)
                    } else {
                        postings.chunks.values[slot].value.optimize()
                        let members = postings.chunks.values[slot].value
                        try cursor.put(k, reserving: members.chunkSize) { _ = members.writeChunk(into: $0) }
                    }
                }
            }
        }
        let memberSlots = Self.inKeyOrder(dirtyMemberships) { memberships.key(at: $0).packed }
        try txn.withCursor(tables.deviceTopics) { cursor in
            for slot in memberSlots where memberships.isDirty(slot) {
                let key = memberships.key(at: slot)
                memberships.setDirty(slot, false)
                try memberships.withList(at: slot) { list in
                    try Keys.withPair(key.pid, key.ordinal) { k in
                        if list.isEmpty {
                            try cursor.delete(k)
                        } else {
                            try cursor.put(k, reserving: DeviceTopics.encodedSize(list)) { DeviceTopics.encode(list, into: $0) }
                        }
                    }
                }
            }
        }
        dirtyTopics.removeAll(keepingCapacity: true)
        postings.dirty.removeAll(keepingCapacity: true)
        storedTops = [:]
        dirtyMemberships.removeAll(keepingCapacity: true)
        var w = ByteWriter(capacity: 8); w.u64(appliedSequence)
        try txn.put(tables.meta, ProjectionTables.appliedSeqKey, w.bytes)
        try directory.stamp(tables, txn, sequence: appliedSequence)
        // What this transaction changed that other writers keep in memory, for them to follow.
        if let stamp = directory.flushedStamp, appliedSequence > transactionStart {
            journalDevices.sort()
            var devices: [UInt64] = []
            devices.reserveCapacity(journalDevices.count)
            for d in journalDevices where d != devices.last { devices.append(d) }
            try WriterJournal.write(WriterJournal.Entry(previousStamp: startedOnStamp, stamp: stamp, from: transactionStart,
                                                        through: appliedSequence, listed: true, names: directory.changes,
                                                        devices: devices), tables, txn)
        }
        // Bound the caches for long replays: everything is written, so start afresh,
        // keeping the records and codes of the most subscribed shared topics, which the
        // next batches reach again (`topicsKeptAcrossBound`), and the counts of the other
        // topics over several slices (see `savedCounts`).
        if postings.count > cacheEntries / 4 || memberships.count > cacheEntries || topics.count > cacheEntries
            || topicCodes.count > cacheEntries {
            let kept = topicsKeptAcrossBound()
            if topicLayout == .compact {
                var isKept = [Bool](repeating: false, count: topics.count)
                for slot in kept { isKept[slot] = true }
                for i in topics.keys.indices where !isKept[i] && topics.values[i].value.slices.count > 1 {
                    savedCounts[UInt64(topics.keys[i].pid) << 32 | UInt64(topics.keys[i].topic)] = topics.values[i].value.subscribers
                }
            }
            topics.keepOnly(slots: kept); postings.removeAll(); memberships.removeAll(); topicCodes.removeAll()
            for i in topics.keys.indices { topicCodes.set(topics.keys[i].pid, topics.values[i].value.code, topics.keys[i].topic) }
        }
    }

    /// The slots (ascending) of the cached topics whose records and codes stay
    /// when the caches are bounded: shared topics of more than one subscriber,
    /// the most subscribed first, at most a quarter of `cacheEntries`. Starting
    /// afresh, the writer read every shared topic again at its next subscriber:
    /// its code, its record and, in the compact layout, its chunks to count them.
    /// A load of bench's commands bounds its caches every ~100 batches of 1,000,
    /// and read its 10,000 shared topics back each time (callgrind: 37,540 topic
    /// records and 27,342 codes read from LMDB in 200 batches).
    private func topicsKeptAcrossBound() -> [Int] {
        var candidates: [(subscribers: UInt32, slot: Int)] = []
        for i in topics.values.indices where !topics.values[i].value.single && topics.values[i].value.subscribers > 1 {
            candidates.append((topics.values[i].value.subscribers, i))
        }
        let most = cacheEntries / 4
        if candidates.count > most {
            candidates.sort { $0.subscribers > $1.subscribers }
            candidates.removeLast(candidates.count - most)
        }
        return candidates.map(\.slot).sorted()
    }
}

extension ProjectionWriter {
    /// `slots` in the order of their keys, packed into 64 bits by `key` (whose
    /// order is the keys' order), sorted with the keys beside them: a sort
    /// that read each slot's key from its table at every comparison missed
    /// the cache (see `PostingCache.sortedDirtySlots`). A slot listed twice
    /// comes twice.
    static func inKeyOrder(_ slots: [Int], key: (Int) -> UInt64) -> [Int] {
        var items: [(key: UInt64, slot: Int)] = []
        items.reserveCapacity(slots.count)
        for slot in slots { items.append((key(slot), slot)) }
        items.sort { $0.key < $1.key }
        return items.map(\.slot)
    }

    /// The order of the tables' keys (`Keys`: big-endian `pid ‖ …`).
    /// A chunk's key is `pid ‖ slice ‖ topic`.
    static func ascending(_ a: ChunkKey, _ b: ChunkKey) -> Bool { (a.pid, a.high, a.topic) < (b.pid, b.high, b.topic) }
}

public enum FoldError: Error, CustomStringConvertible {
    case outOfOrder(expected: UInt64, got: UInt64)
    public var description: String {
        switch self {
        case .outOfOrder(let e, let g): return "event sequence \(g) applied out of order (expected \(e))"
        }
    }
}

// MARK: Build mode

extension ProjectionWriter {
    /// Whether the build holds more than its memory budget (roughly): time to
    /// `writeBuild` and go on in a new round.
    public var isOverBudget: Bool {
        guard let build else { return false }
        return buildFootprint(build) > build.memoryBudget || build.topicCodes.nameBytes > 2 << 30
    }

    private func buildFootprint(_ build: BuildState) -> Int {
        var bytes = build.footprint + directory.footprint
        bytes += memberships.footprint + topics.count * 256 + topicCodes.footprint
        if let postingWorker {
            drainPostingWorker(postingWorker)
            bytes += postingWorker.footprint + pendingPostings.capacity * MemoryLayout<PostingWorker.Change>.stride
            // The topic chunks to be made of the lists: about 16 bytes a member (measured at
            // 1M devices, 8.8 M subscriptions in 1.13 M chunks, the chunk table's entries included).
            bytes += buildSubscriptions * 16
        }
        return bytes + postings.footprint
    }

    /// Takes over what the posting worker built (the built-in sets), and starts
    /// making the topics' chunks from the devices' lists on another core
    /// (`PostingInversion`): until now no topic chunk exists and every
    /// topic's slice list is empty (`setBit` left topics alone while the
    /// worker was there). The build goes on without the worker.
    private func adoptPostingWorker(_ build: BuildState) {
        guard let worker = postingWorker else { return }
        drainPostingWorker(worker)
        postingWorker = nil
        handsPostingsToWorker = false
        pendingPostings = []
        swap(&postings, &worker.postings)
        buildSubscriptions = 0
        inversionInput = InvertedChunks.Input(projects: build.memberColumns(), lists: memberships.snapshot,
                                              topicSlots: build.topicSlotColumns, topicCount: topics.count)
    }

    /// Sizes the build's device_id and token indexes and topic lists for
    /// about `devices` devices, and its topic codes and topic records for
    /// about `topics` topics, so they do not grow by rehashing and copying on
    /// the way (a hint; they grow beyond it). The indexes' tables are touched now.
    public func reserveBuild(devices: Int, topics topicCount: Int = 0) {
        guard let build else { return }
        // The topic codes' table is zeroed on the other core while this one zeroes the
        // device_id and token indexes (about 68 MB each for a million devices and topics):
        // memory a process touches for the first time is slow on a VM, and the log's
        // reader, started already, waits for the fold meanwhile. On the 1M store this
        // took the reserve from 0.02–0.63 s to 0.02–0.32 s (alternating runs).
        let codes = build.topicCodes
        let codesReserved = topicCount > 0 ? Background { codes.reserve(topicCount) } : nil
        build.reserve(devices: devices)
        directory.reserve(devices)
        memberships.reserve(devices: devices, ids: 12)
        if topicCount > 0 { topics.reserve(topicCount) }
        codesReserved?.value()
    }

    /// Whether a build is held that `writeBuild` would write into a target that
    /// holds no projection yet (the first write of a build from nothing).
    public var holdsBuildForEmptyTarget: Bool { build.map { $0.begun && $0.targetIsEmpty } ?? false }

    /// The tables `writeBuild` writes into a page file when given one: those of
    /// a build's millions of entries.
    public var bulkTables: [Database] { [tables.deviceTopics, tables.devices, tables.topicCodes, tables.postings, tables.topics] }

    /// Writes everything the build holds into `txn`, each table in key order
    /// (appended when the target was empty), and the applied sequence. The
    /// build's state is left as it was, so a transaction that fails (a full
    /// map) can be redone; after it commits, call `didWriteBuild()`.
    ///
    /// With `file` (only into an empty target: `holdsBuildForEmptyTarget`), the
    /// `bulkTables` are laid out in it, one after the other, instead of put
    /// into `txn`, where the rest still goes; their tables in `txn` stay empty.
    public func writeBuild(_ txn: borrowing Transaction, bulkInto file: PageFileWriter? = nil) throws {
        guard let build else { preconditionFailure("writeBuild on a writer not in build mode") }
        // Nothing was folded: the build holds nothing, and it never read the
        // target's applied sequence. Writing its own (0) over that of a target
        // that starts from a snapshot would make a store at the horizon claim seq 0.
        guard build.begun else { return }
        let fresh = build.targetIsEmpty
        precondition(file == nil || fresh, "a page file holds a build into an empty target only")
        let append: Transaction.PutFlags = fresh ? .append : []
        settleCurrentProject(build)
        // Meanwhile, on the other core: the devices encoded, the topic codes
        // sorted, the topics' chunks made from the lists (`InvertedChunks`). The
        // tables that need none of them are written first.
        let devices = EncodedDevices(build.devices)
        defer { devices.close() }
        let codes = build.topicCodes
        let codeOrder = self.codeOrder
        let sortedCodes = Background { codes.sortedSlots(codeOrder) }
        adoptPostingWorker(build)
        let inverted = inversionInput.map { InvertedChunks($0) }
        defer { inverted?.close() }
        // (A fresh target holds no record that leaves a slice out.)
        let newest = try prepareTopicWrites(relists: !fresh, txn)
        var key = [UInt8](repeating: 0, count: 16)
        // One buffer the values are encoded into, grown as needed.
        var value = [UInt8](repeating: 0, count: 16 << 10)

        let names = projects.names
        for slot in projects.indices.sorted(by: { names[$0].utf8.lexicographicallyPrecedes(names[$1].utf8) }) where projects[slot].dirty {
            try txn.put(tables.projects, Array(names[slot].utf8), projects[slot].value.encoded(), flags: append)
        }
        if let next = nextProjectID {
            var w = ByteWriter(capacity: 4); w.u32(next)
            try txn.put(tables.meta, ProjectionTables.nextProjectKey, w.bytes)
        }

        if !fresh {
            for t in build.droppedTopics { try txn.delete(tables.topics, Keys.pair(t.pid, t.topic)) }
        }
        // Keys and values go through reused buffers: allocating two arrays per
        // entry for a million topics and chunks kept malloc consolidating between
        // LMDB's page allocations. Each bulk table is appended through one cursor
        // (which stays on the last page), or laid out in the page file.
        typealias Put = (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void
        func appending(to db: Database, _ body: (Put) throws -> Void) throws {
            if let file {
                file.beginTable(db.name)
                try body { k, v in try file.append(k, v) }
                try file.endTable()
            } else {
                try txn.withCursor(db) { cursor in try body { k, v in try cursor.put(k, v, flags: append) } }
            }
        }
        func pairKey(_ pid: UInt32, _ a: UInt32, _ body: (UnsafeRawBufferPointer) throws -> Void) rethrows {
            try key.withUnsafeMutableBytes { k in
                k.storeBytes(of: pid.bigEndian, toByteOffset: 0, as: UInt32.self)
                k.storeBytes(of: a.bigEndian, toByteOffset: 4, as: UInt32.self)
                try body(UnsafeRawBufferPointer(rebasing: k[0..<8]))
            }
        }
        // Devices, their topic lists: ordinal keys, usually created in order already.
        // Every membership slot of a build is indexed by ordinal: read in that order, they need no sort.
        let memberSlots = build.memberSlotsInKeyOrder().filter { memberships.isDirty($0) }
        // (Read through one snapshot: each list read through `memberships`, a
        // property of this class, retained and released the arena.)
        try memberships.snapshot.read { lists in
            try appending(to: tables.deviceTopics) { put in
                for slot in memberSlots {
                    let k = memberships.key(at: slot)
                    try lists.withList(at: slot) { list in
                        if list.isEmpty {
                            if !fresh { try txn.delete(tables.deviceTopics, Keys.pair(k.pid, k.ordinal)) }
                            return
                        }
                        let size = DeviceTopics.encodedSize(list)
                        if value.count < size { value = [UInt8](repeating: 0, count: max(size, 2 * value.count)) }
                        try value.withUnsafeMutableBytes { vb in
                            let encoded = UnsafeMutableRawBufferPointer(rebasing: vb[0..<size])
                            DeviceTopics.encode(list, into: encoded)
                            try pairKey(k.pid, k.ordinal) { kb in try put(kb, UnsafeRawBufferPointer(encoded)) }
                        }
                    }
                }
            }
        }
        try appending(to: tables.devices) { put in
            try devices.forEach { pid, ordinal, record in
                guard let record else {
                    if !fresh { try txn.delete(tables.devices, Keys.pair(pid, ordinal)) }
                    return
                }
                try pairKey(pid, ordinal) { kb in try put(kb, record) }
            }
        }

        let order = sortedCodes.value()
        try appending(to: tables.topicCodes) { put in
            try codes.forEach(in: order, codeOrder) { k, tid in
                guard let tid else {
                    if !fresh { try txn.delete(tables.topicCodes, Array(k)) }
                    return
                }
                try withUnsafeBytes(of: tid.bigEndian) { vb in try put(k, vb) }
            }
        }

        // The chunks the writer holds, merged in key order with those made from the lists.
        let chunkSlots = postings.sortedDirtySlots()
        try appending(to: tables.postings) { putEntry in
            func put(_ k: ChunkKey, _ v: UnsafeRawBufferPointer) throws {
                try key.withUnsafeMutableBytes { kb in
                    kb.storeBytes(of: k.pid.bigEndian, toByteOffset: 0, as: UInt32.self)
                    kb.storeBytes(of: k.high.bigEndian, toByteOffset: 4, as: UInt16.self)
                    kb.storeBytes(of: k.topic.bigEndian, toByteOffset: 6, as: UInt32.self)
                    try putEntry(UnsafeRawBufferPointer(rebasing: kb[0..<10]), v)
                }
            }
            var pending = try inverted?.next()
            var j = 0
            func putInverted(before limit: ChunkKey?) throws {
                while let chunk = pending, limit.map({ Self.ascending(chunk.key, $0) }) ?? true {
                    try put(chunk.key, chunk.bytes)
                    // Each topic's slices come ascending (and its list was empty);
                    // a write that is redone took the first ones already.
                    if j == invertedSlicesApplied {
                        modifyTopic(at: Int(chunk.slot)) { $0.slices.append(chunk.key.high) }
                        invertedSlicesApplied += 1
                    }
                    j += 1
                    pending = try inverted?.next()
                }
            }
            for slot in chunkSlots {
                let k = postings.chunks.keys[slot]
                try putInverted(before: k)
                if postings.chunks.values[slot].value.isEmpty {
                    if !fresh { try txn.delete(tables.postings, Keys.chunk(k.pid, k.topic, k.high)) }
                    continue
                }
                postings.chunks.values[slot].value.optimize()
                let size = postings.chunks.values[slot].value.chunkSize
                if value.count < size { value = [UInt8](repeating: 0, count: max(size, 2 * value.count)) }
                try value.withUnsafeMutableBytes { vb in
                    let written = postings.chunks.values[slot].value.writeChunk(into: vb)
                    try put(k, UnsafeRawBufferPointer(rebasing: vb[0..<written]))
                }
            }
            try putInverted(before: nil)
        }

        // A build's topics are indexed by id: read in that order, they need no sort.
        let topicSlots = build.topicSlotsInKeyOrder().filter { topics.values[$0].dirty }
        try appending(to: tables.topics) { put in
            var newestOfProject: (pid: UInt32, slice: UInt16?)? = nil
            let storingCount = topicLayout == .legacy
            for slot in topicSlots {
                let k = topics.keys[slot]
                // (Taken once: each use of `topics.values[slot]` copied the
                // record, its strings and slices retained and released.)
                let record = topics.values[slot].value
                let omits = try omitsLastSlice(k, record, newest: newest, &newestOfProject)
                let size = record.encodedSizeBound()
                if value.count < size { value = [UInt8](repeating: 0, count: max(size, 2 * value.count)) }
                try value.withUnsafeMutableBytes { vb in
                    let written = record.encode(into: vb.baseAddress!, storingCount: storingCount, omittingLastSlice: omits)
                    try pairKey(k.pid, k.topic) { kb in
                        try put(kb, UnsafeRawBufferPointer(rebasing: vb[0..<written]))
                    }
                }
            }
        }

        var w = ByteWriter(capacity: 8); w.u64(appliedSequence)
        try txn.put(tables.meta, ProjectionTables.appliedSeqKey, w.bytes)
        try directory.stamp(tables, txn, sequence: appliedSequence)  // a live writer of this store sees that someone else wrote
    }

    /// After the transaction `writeBuild` wrote into committed: the build
    /// starts a new round with empty caches over what the target now holds.
    public func didWriteBuild() {
        guard let build else { return }
        // Millions of small arrays and strings take a while to free: the
        // other core does it (the last references go with `held`).
        let held = Garbage([memberships, postings, topics, build.devices])
        memberships = MembershipLists(); postings = PostingCache(tracksLastChunks: true); topics = SlotTable()
        inversionInput = nil
        invertedSlicesApplied = 0
        clearCaches()
        build.removeAll()
        build.clearCurrentProject()
        build.targetIsEmpty = false
        DispatchQueue.global().async { held.drop() }
    }
}

// The inversion reads copies of these beside the writer (`InvertedChunks`).
extension ProjectionWriter.Cached: Sendable where Value: Sendable {}
