internal import CSQLite

/// An SQLite error with the library's message.
public struct SQLiteError: Error, Sendable, CustomStringConvertible {
    public let code: Int32
    public let message: String
    public var description: String { "SQLite error \(code): \(message)" }
}

/// A minimal SQLite connection for the benchmark's competitor: prepared
/// statements, typed binds and column reads, nothing more.
final class SQLiteConnection {
    let handle: OpaquePointer

    init(path: String, readOnly: Bool = false) throws {
        var db: OpaquePointer?
        let flags = readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)
        let rc = sqlite3_open_v2(path, &db, flags | SQLITE_OPEN_NOMUTEX, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            if let db { sqlite3_close_v2(db) }
            throw SQLiteError(code: rc, message: "\(path): \(message)")
        }
        handle = db
        sqlite3_busy_timeout(db, 10_000)
    }

    deinit { sqlite3_close_v2(handle) }

    func check(_ rc: Int32) throws {
        if rc != SQLITE_OK && rc != SQLITE_ROW && rc != SQLITE_DONE {
            throw SQLiteError(code: rc, message: String(cString: sqlite3_errmsg(handle)))
        }
    }

    func execute(_ sql: String) throws {
        var error: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &error)
        if rc != SQLITE_OK {
            let message = error.map { String(cString: $0) } ?? "error"
            sqlite3_free(error)
            throw SQLiteError(code: rc, message: message)
        }
    }

    func prepare(_ sql: String) throws -> SQLiteStatement {
        var stmt: OpaquePointer?
        try check(sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil))
        guard let stmt else { throw SQLiteError(code: SQLITE_MISUSE, message: "empty statement: \(sql)") }
        return SQLiteStatement(stmt, connection: self)
    }

    var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }
    var changes: Int { Int(sqlite3_changes(handle)) }

    /// A single integer from a query.
    func scalar(_ sql: String) throws -> Int64 {
        let s = try prepare(sql)
        guard try s.step() else { return 0 }
        return s.int64(0)
    }
}

/// `SQLITE_TRANSIENT`: SQLite copies bound text and blobs.
private let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

final class SQLiteStatement {
    let handle: OpaquePointer
    unowned let connection: SQLiteConnection

    init(_ handle: OpaquePointer, connection: SQLiteConnection) {
        self.handle = handle
        self.connection = connection
    }

    deinit { sqlite3_finalize(handle) }

    /// Clears bindings and rewinds for the next use.
    func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    func bind(_ index: Int32, _ value: Int64) { sqlite3_bind_int64(handle, index, value) }
    func bind(_ index: Int32, _ value: Int) { sqlite3_bind_int64(handle, index, Int64(value)) }
    func bindNull(_ index: Int32) { sqlite3_bind_null(handle, index) }
    func bind(_ index: Int32, _ value: String) {
        var v = value
        _ = v.withUTF8 { sqlite3_bind_text(handle, index, UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), Int32($0.count), transient) }
    }
    func bind(_ index: Int32, _ value: String?) { if let value { bind(index, value) } else { bindNull(index) } }
    func bind(_ index: Int32, blob: [UInt8]) {
        _ = blob.withUnsafeBytes { sqlite3_bind_blob(handle, index, $0.baseAddress, Int32($0.count), transient) }
    }

    /// One step: true when a row is available, false when done.
    @discardableResult
    func step() throws -> Bool {
        let rc = sqlite3_step(handle)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        throw SQLiteError(code: rc, message: String(cString: sqlite3_errmsg(connection.handle)))
    }

    /// Runs a statement that returns no rows, then resets it.
    func run() throws {
        defer { reset() }
        try step()
    }

    func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }

    /// The bytes of a text or blob column, borrowed until the next step or reset.
    func bytes(_ column: Int32) -> UnsafeRawBufferPointer {
        let p = sqlite3_column_blob(handle, column)
        let n = Int(sqlite3_column_bytes(handle, column))
        return UnsafeRawBufferPointer(start: p, count: p == nil ? 0 : n)
    }
}
