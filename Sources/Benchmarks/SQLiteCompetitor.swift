internal import CSQLite
import Projections
import SubscriptionLog

#if canImport(Glibc)
import Glibc
#endif

/// The same store written the way a competent engineer would with SQLite:
/// WAL, `synchronous=FULL` (each commit is fsynced, as LMDB's default), an
/// append-only `events` table holding the same encoded records as the
/// topicstore log, and normalised tables with the indexes the operations need:
///
/// ```sql
/// devices(id INTEGER PRIMARY KEY, device_id TEXT UNIQUE, token TEXT UNIQUE, platform, token_time, rejected_at)
/// topics(id INTEGER PRIMARY KEY, code TEXT UNIQUE, title, single)
/// subscriptions(topic_id, device_id, PRIMARY KEY(topic_id, device_id)) WITHOUT ROWID
///   + INDEX subscriptions_by_device(device_id, topic_id)
/// ```
///
/// One project per database (the benchmark uses one), which spares SQLite the
/// project prefix topicstore keys carry. The fold mirrors `Fold.apply`: token
/// upsert that takes a token away from its previous holder, register creating
/// topics, unregister, unregister-all, and rejections that only stop a token
/// registered before them.
public final class SQLiteCompetitor {
    public static let fileName = "bench.sqlite"
    let db: SQLiteConnection
    public let path: String
    private var sequence: Int64

    // Prepared statements of the write path.
    private let insertEvent: SQLiteStatement
    private let releaseToken: SQLiteStatement
    private let upsertToken: SQLiteStatement
    private let deviceByID: SQLiteStatement
    private let insertDevice: SQLiteStatement
    private let topicByCode: SQLiteStatement
    private let insertTopic: SQLiteStatement
    private let updateTopic: SQLiteStatement
    private let subscribe: SQLiteStatement
    private let unsubscribe: SQLiteStatement
    private let unsubscribeAll: SQLiteStatement
    private let rejectToken: SQLiteStatement
    private let begin: SQLiteStatement
    private let commit: SQLiteStatement

    /// Opens (creating when needed) `directory/bench.sqlite`.
    public init(directory: String) throws {
        path = directory + "/" + Self.fileName
        db = try SQLiteConnection(path: path)
        try Self.configure(db)
        try db.execute("""
            CREATE TABLE IF NOT EXISTS events(seq INTEGER PRIMARY KEY, ts INTEGER NOT NULL, record BLOB NOT NULL);
            CREATE TABLE IF NOT EXISTS devices(
                id INTEGER PRIMARY KEY, device_id TEXT NOT NULL UNIQUE, token TEXT UNIQUE,
                platform INTEGER, token_time INTEGER NOT NULL DEFAULT 0, rejected_at INTEGER);
            CREATE TABLE IF NOT EXISTS topics(
                id INTEGER PRIMARY KEY, code TEXT NOT NULL UNIQUE, title TEXT NOT NULL, single INTEGER NOT NULL DEFAULT 0);
            CREATE TABLE IF NOT EXISTS subscriptions(
                topic_id INTEGER NOT NULL, device_id INTEGER NOT NULL, PRIMARY KEY(topic_id, device_id)) WITHOUT ROWID;
            CREATE INDEX IF NOT EXISTS subscriptions_by_device ON subscriptions(device_id, topic_id);
            """)
        sequence = try db.scalar("SELECT coalesce(max(seq), 0) FROM events")
        insertEvent = try db.prepare("INSERT INTO events(seq, ts, record) VALUES(?1, ?2, ?3)")
        releaseToken = try db.prepare("UPDATE devices SET token = NULL, rejected_at = NULL WHERE token = ?1 AND device_id <> ?2")
        upsertToken = try db.prepare("""
            INSERT INTO devices(device_id, token, platform, token_time) VALUES(?1, ?2, ?3, ?4)
            ON CONFLICT(device_id) DO UPDATE SET token = excluded.token, platform = excluded.platform,
                token_time = excluded.token_time, rejected_at = NULL
            """)
        deviceByID = try db.prepare("SELECT id FROM devices WHERE device_id = ?1")
        insertDevice = try db.prepare("INSERT INTO devices(device_id) VALUES(?1)")
        topicByCode = try db.prepare("SELECT id FROM topics WHERE code = ?1")
        insertTopic = try db.prepare("INSERT INTO topics(code, title, single) VALUES(?1, coalesce(?2, ?1), coalesce(?3, 0))")
        updateTopic = try db.prepare("UPDATE topics SET title = coalesce(?2, title), single = coalesce(?3, single) WHERE id = ?1")
        subscribe = try db.prepare("INSERT OR IGNORE INTO subscriptions(topic_id, device_id) VALUES(?1, ?2)")
        unsubscribe = try db.prepare("DELETE FROM subscriptions WHERE topic_id = (SELECT id FROM topics WHERE code = ?1) AND device_id = ?2")
        unsubscribeAll = try db.prepare("DELETE FROM subscriptions WHERE device_id = ?1")
        rejectToken = try db.prepare("UPDATE devices SET rejected_at = ?2 WHERE token = ?1 AND rejected_at IS NULL AND token_time <= ?2")
        begin = try db.prepare("BEGIN IMMEDIATE")
        commit = try db.prepare("COMMIT")
    }

    /// The settings a competent engineer would choose: WAL with full sync
    /// (durable like LMDB's default), a 128 MiB page cache and memory-mapped reads.
    static func configure(_ db: SQLiteConnection) throws {
        try db.execute("""
            PRAGMA journal_mode = WAL;
            PRAGMA synchronous = FULL;
            PRAGMA cache_size = -131072;
            PRAGMA mmap_size = 17179869184;
            PRAGMA temp_store = MEMORY;
            """)
    }

    /// Applies `events` in one durable transaction (what one topicstore group commit does).
    public func apply(_ events: [Event]) throws {
        try begin.run()
        do {
            let now = Self.nowMillis()
            for event in events {
                sequence += 1
                let record = LogRecord(sequence: UInt64(sequence), timestamp: now, event: event)
                insertEvent.bind(1, sequence); insertEvent.bind(2, now); insertEvent.bind(3, blob: try RecordCodec.encode(record))
                try insertEvent.run()
                try fold(event.body, now: now)
            }
            try commit.run()
        } catch {
            try? db.execute("ROLLBACK")
            throw error
        }
    }

    private func deviceRow(_ deviceID: String, create: Bool) throws -> Int64? {
        deviceByID.bind(1, deviceID)
        defer { deviceByID.reset() }
        if try deviceByID.step() { return deviceByID.int64(0) }
        guard create else { return nil }
        insertDevice.bind(1, deviceID)
        try insertDevice.run()
        return db.lastInsertRowID
    }

    private func fold(_ body: EventBody, now: Int64) throws {
        switch body {
        case .token(let deviceID, let token, let platform):
            releaseToken.bind(1, token); releaseToken.bind(2, deviceID)
            try releaseToken.run()
            upsertToken.bind(1, deviceID); upsertToken.bind(2, token)
            upsertToken.bind(3, Int64(platform.rawValue)); upsertToken.bind(4, now)
            try upsertToken.run()
        case .register(let deviceID, let topics):
            guard let device = try deviceRow(deviceID, create: true) else { return }
            for spec in topics {
                topicByCode.bind(1, spec.code)
                let topic: Int64
                if try topicByCode.step() {
                    topic = topicByCode.int64(0)
                    topicByCode.reset()
                    if spec.title != nil || spec.single != nil {
                        updateTopic.bind(1, topic); updateTopic.bind(2, spec.title)
                        if let s = spec.single { updateTopic.bind(3, s ? 1 : 0) } else { updateTopic.bindNull(3) }
                        try updateTopic.run()
                    }
                } else {
                    topicByCode.reset()
                    insertTopic.bind(1, spec.code); insertTopic.bind(2, spec.title)
                    if let s = spec.single { insertTopic.bind(3, s ? 1 : 0) } else { insertTopic.bindNull(3) }
                    try insertTopic.run()
                    topic = db.lastInsertRowID
                }
                subscribe.bind(1, topic); subscribe.bind(2, device)
                try subscribe.run()
            }
        case .unregister(let deviceID, let codes):
            guard let device = try deviceRow(deviceID, create: false) else { return }
            for code in codes {
                unsubscribe.bind(1, code); unsubscribe.bind(2, device)
                try unsubscribe.run()
            }
        case .unregisterAll(let deviceID):
            guard let device = try deviceRow(deviceID, create: false) else { return }
            unsubscribeAll.bind(1, device)
            try unsubscribeAll.run()
        case .tokenRejected(let token, let at, _):
            rejectToken.bind(1, token); rejectToken.bind(2, at)
            try rejectToken.run()
        case .forgetDevice(let deviceID):
            // Garbage collection; not in the benchmark workload, so prepared on demand.
            guard let device = try deviceRow(deviceID, create: false) else { return }
            for sql in ["DELETE FROM subscriptions WHERE device_id = ?1", "DELETE FROM devices WHERE id = ?1"] {
                let statement = try db.prepare(sql)
                statement.bind(1, device)
                try statement.run()
            }
        case .dropTopic(let code):
            for sql in ["DELETE FROM subscriptions WHERE topic_id = (SELECT id FROM topics WHERE code = ?1)",
                        "DELETE FROM topics WHERE code = ?1"] {
                let statement = try db.prepare(sql)
                statement.bind(1, code)
                try statement.run()
            }
        case .expireToken(let token):
            let statement = try db.prepare("UPDATE devices SET token = NULL, rejected_at = NULL WHERE token = ?1 AND rejected_at IS NOT NULL")
            statement.bind(1, token)
            try statement.run()
        }
    }

    static func nowMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    /// Moves the WAL into the database file (before measuring its size).
    public func checkpoint() throws {
        try db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    /// A second connection for reads, for use on another thread while this one writes.
    public func openReader() throws -> SQLiteReader { try SQLiteReader(path: path) }
}

/// Audience counts and token streaming in SQL, on its own connection.
public final class SQLiteReader {
    let db: SQLiteConnection
    private var cache: [String: (SQLiteStatement, [String])] = [:]

    init(path: String) throws {
        db = try SQLiteConnection(path: path)
        try SQLiteCompetitor.configure(db)
    }

    static let live = "d.token IS NOT NULL AND d.rejected_at IS NULL"

    /// `count(DISTINCT …)` over subscriptions joined with devices, per platform:
    /// the SQL for "devices on any of these topics".
    static func anyOfSQL(_ n: Int) -> String {
        let marks = (1...n).map { "?\($0)" }.joined(separator: ", ")
        return """
            SELECT count(DISTINCT s.device_id),
                   count(DISTINCT CASE WHEN d.platform = 1 AND \(live) THEN s.device_id END),
                   count(DISTINCT CASE WHEN d.platform = 2 AND \(live) THEN s.device_id END)
            FROM subscriptions s JOIN devices d ON d.id = s.device_id
            WHERE s.topic_id IN (SELECT id FROM topics WHERE code IN (\(marks)))
            """
    }

    /// A boolean audience as a predicate over `devices d`, with its bound codes in order.
    static func predicate(_ e: AudienceExpression, _ parameters: inout [String]) -> String {
        switch e {
        case .topic, .or:
            var codes: [String] = []
            var others: [AudienceExpression] = []
            func collect(_ e: AudienceExpression) {
                switch e {
                case .or(let a, let b): collect(a); collect(b)
                case .topic(let c): codes.append(c)
                default: others.append(e)
                }
            }
            collect(e)
            var parts: [String] = []
            if !codes.isEmpty {
                let marks = codes.map { code -> String in parameters.append(code); return "?\(parameters.count)" }
                parts.append("d.id IN (SELECT device_id FROM subscriptions WHERE topic_id IN "
                             + "(SELECT id FROM topics WHERE code IN (\(marks.joined(separator: ", ")))))")
            }
            for o in others { parts.append(predicate(o, &parameters)) }
            return parts.count == 1 ? parts[0] : "(" + parts.joined(separator: " OR ") + ")"
        case .platform(let p):
            return "(d.platform = \(p.rawValue) AND \(live))"
        case .allDevices:
            return "1"
        case .and(let a, let b):
            return "(\(predicate(a, &parameters)) AND \(predicate(b, &parameters)))"
        case .not(let a):
            return "NOT \(predicate(a, &parameters))"
        }
    }

    static func expressionSQL(_ e: AudienceExpression) -> (String, [String]) {
        var parameters: [String] = []
        let p = predicate(e, &parameters)
        return ("""
            SELECT count(*), coalesce(sum(d.platform = 1 AND \(live)), 0), coalesce(sum(d.platform = 2 AND \(live)), 0)
            FROM devices d WHERE \(p)
            """, parameters)
    }

    private func statement(_ key: String, _ make: () -> (String, [String])) throws -> (SQLiteStatement, [String]) {
        if let s = cache[key] { return s }
        let (sql, parameters) = make()
        let s = (try db.prepare(sql), parameters)
        cache[key] = s
        return s
    }

    /// Counts (total, ios, android) of the devices on any of `codes`, in one read transaction.
    public func counts(anyOf codes: [String]) throws -> AudienceTally {
        let (s, _) = try statement("any:\(codes.count)") { (Self.anyOfSQL(codes.count), []) }
        for (i, c) in codes.enumerated() { s.bind(Int32(i + 1), c) }
        defer { s.reset() }
        guard try s.step() else { return AudienceTally() }
        return AudienceTally(total: Int(s.int64(0)), ios: Int(s.int64(1)), android: Int(s.int64(2)))
    }

    /// A prepared query asked as `TopicStoreEngine.counts` asks it: a list of
    /// topics bound to one statement, an expression translated.
    func counts(_ q: PreparedQuery) throws -> AudienceTally {
        switch q.query {
        case .anyOf(let codes): return try counts(anyOf: codes)
        case .expression: return try counts(expression: q.expression)
        }
    }

    /// Counts of a boolean audience, translated to SQL.
    public func counts(expression e: AudienceExpression) throws -> AudienceTally {
        let (s, parameters) = try statement("expr:\(e)") { Self.expressionSQL(e) }
        for (i, c) in parameters.enumerated() { s.bind(Int32(i + 1), c) }
        defer { s.reset() }
        guard try s.step() else { return AudienceTally() }
        return AudienceTally(total: Int(s.int64(0)), ios: Int(s.int64(1)), android: Int(s.int64(2)))
    }

    /// Streams (device_id, token, platform) of the reachable devices on `topic`
    /// in device order, handing each row's bytes to `sink`.
    public func stream(topic: String, into sink: inout RecipientSink) throws {
        let (s, _) = try statement("stream") { ("""
            SELECT d.device_id, d.token, d.platform FROM subscriptions s JOIN devices d ON d.id = s.device_id
            WHERE s.topic_id = (SELECT id FROM topics WHERE code = ?1) AND \(Self.live)
            ORDER BY s.device_id
            """, []) }
        s.bind(1, topic)
        defer { s.reset() }
        try db.execute("BEGIN")
        defer { try? db.execute("COMMIT") }
        while try s.step() {
            sink.take(deviceID: s.bytes(0), token: s.bytes(1), platform: UInt8(truncatingIfNeeded: s.int64(2)))
        }
    }
}

/// Counts of an audience as every engine reports them.
public struct AudienceTally: Sendable, Hashable, CustomStringConvertible {
    public var total = 0
    public var ios = 0
    public var android = 0
    public init(total: Int = 0, ios: Int = 0, android: Int = 0) {
        self.total = total
        self.ios = ios
        self.android = android
    }
    public var description: String { "total \(total), ios \(ios), android \(android)" }
}

/// The per-recipient work of every streaming measurement: copy the device id
/// and token into an output buffer (as a send service fills a request) and sum
/// the bytes, so that no engine can skip touching them.
public struct RecipientSink {
    public private(set) var recipients = 0
    public private(set) var bytes = 0
    public private(set) var checksum: UInt64 = 0
    private var buffer: UnsafeMutableRawBufferPointer
    private var used = 0

    public init(capacity: Int = 1 << 20) {
        buffer = .allocate(byteCount: capacity, alignment: 16)
    }

    public func deallocate() { buffer.deallocate() }

    @inline(__always)
    private mutating func copy(_ b: UnsafeRawBufferPointer) {
        if used + b.count > buffer.count {
            if used > 0 { checksum &+= UInt64(buffer[used - 1]) }  // "send" the buffer
            used = 0
        }
        if let base = b.baseAddress, b.count > 0 {
            (buffer.baseAddress! + used).copyMemory(from: base, byteCount: b.count)
            used += b.count
        }
        bytes += b.count
    }

    @inline(__always)
    public mutating func take(deviceID: UnsafeRawBufferPointer, token: UnsafeRawBufferPointer, platform: UInt8) {
        copy(deviceID)
        copy(token)
        checksum &+= UInt64(platform)
        recipients += 1
    }

    /// A whole stored record (the raw walk cannot know where the token is without decoding it).
    @inline(__always)
    public mutating func take(record: UnsafeRawBufferPointer) {
        copy(record)
        recipients += 1
    }
}
