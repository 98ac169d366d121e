internal import CLMDB
import Foundation

/// A copy of an environment with every page full.
///
/// LMDB's compacting copy (`Environment.copy(to:compact: true)`) leaves out
/// free pages but copies the pages in use as they are: a table changed in
/// random key order for months keeps leaves about half full, and so does every
/// copy of it (a soak of nights of churn, each compacted, saw the devices table
/// grow from 158 to 337 bytes a device at the same 100,000 devices). This copy
/// writes each entry again, table by table in key order, into a file it lays
/// out itself (`PageFileWriter`), which fills every leaf before it starts the
/// next, as `MDB_APPEND` does: the pages come out full.
public enum PackedCopy {
    /// What a packed copy wrote.
    public struct Report: Sendable {
        /// Entries written, and entries left out by `startingAt`.
        public var entries = 0
        public var skipped = 0
        /// The size of the new data.mdb.
        public var fileBytes = 0
    }

    /// Writes `source` as of one read transaction into `directory` (`write`, below), its
    /// tables opened first in a committed transaction as `write` needs; a table added between
    /// the two is taken by starting again.
    public static func copy(_ source: Environment, to directory: String,
                            startingAt: [String: [UInt8]] = [:], rewriting: [String: @Sendable () -> any EntryRewriter] = [:]) throws -> Report {
        while true {
            let names = try source.read { txn in try databaseNames(txn) }
            _ = try source.openDatabases(names, create: false)
            let report = try source.read { txn -> Report? in
                guard try databaseNames(txn) == names else { return nil }
                return try write(txn, of: source, to: directory, startingAt: startingAt, rewriting: rewriting)
            }
            if let report { return report }
        }
    }

    /// Gives a table's entries another form as a packed copy writes them: it
    /// takes the source's entries in key order and hands on what to write, in
    /// ascending key order (compaction gives the log's records in blocks this
    /// way). Bytes it is given stay valid while the copy runs (the source's
    /// read transaction is open), so it may hold them until it writes.
    public protocol EntryRewriter {
        /// The next entry of the source; `write` each entry it makes of those taken so far.
        mutating func take(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer,
                           write: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws
        /// After the last entry: writes what it still holds.
        mutating func finish(write: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws
    }

    /// The names of the named databases `txn` sees (the keys of LMDB's main database).
    public static func databaseNames(_ txn: borrowing Transaction) throws -> [String] {
        var names: [String] = []
        try forEachMainEntry(txn) { key in names.append(String(decoding: key, as: UTF8.self)) }
        return names
    }

    /// Writes what `txn` sees of `source` into a new environment in `directory`
    /// (an existing, empty directory). Every named database is copied with its
    /// flags; one with sorted duplicates (`MDB_DUPSORT`, which topicstore never
    /// creates) is refused, `LMDBError.incompatible`. `startingAt[name]` leaves out the keys of that database before the
    /// given one (compaction leaves the trimmed log behind this way, without
    /// reading it). The new file is laid out by a `PageFileWriter` and synced
    /// before this returns; its map is the source's (or `mapSize`), at least the file.
    ///
    /// Every database must already be open in the process (`Environment.openDatabases`,
    /// in a committed transaction): a handle opened in a read transaction closes
    /// again when it ends, under any other user of it. `databaseNames` on a
    /// committed transaction before, and the same names seen by `txn`, make sure.
    public static func write(_ txn: borrowing Transaction, of source: Environment, to directory: String,
                             startingAt: [String: [UInt8]] = [:], rewriting: [String: @Sendable () -> any EntryRewriter] = [:],
                             mapSize: Int? = nil) throws -> Report {
        let names = try databaseNames(txn)
        let path = directory + "/data.mdb"
        var report = Report()
        do {
            let file = try PageFileWriter(path: path, pageSize: source.info().pageSize, mode: Environment.dataFileMode)
            try appendTables(names, from: txn, startingAt: startingAt, rewriting: rewriting, into: file, &report)
            report.fileBytes = try file.finish(mapSize: mapSize ?? max(source.info().mapSize, 1 << 20)).fileBytes
        } catch {
            unlink(path)
            throw error
        }
        chmod(path, Environment.dataFileMode)  // the mode less the umask, as made
        return report
    }

    /// Appends every table `txn` sees but those named in `except` to `file`, each
    /// with its flags, entry by entry in key order (a rebuild's small tables,
    /// beside the bulk ones it lays out itself).
    public static func copyTables(from txn: borrowing Transaction, except: Set<String>, into file: PageFileWriter) throws {
        var report = Report()
        try appendTables(try databaseNames(txn).filter { !except.contains($0) }, from: txn, into: file, &report)
    }

    /// Appends tables `names` of `txn` to `file`, each with its flags, from
    /// `startingAt[name]` and through `rewriting[name]` where given.
    private static func appendTables(_ names: [String], from txn: borrowing Transaction, startingAt: [String: [UInt8]] = [:],
                                     rewriting: [String: @Sendable () -> any EntryRewriter] = [:],
                                     into file: PageFileWriter, _ report: inout Report) throws {
        for name in names {
            let (dbi, flags) = try openSource(name, txn)
            file.beginTable(name, flags: flags)
            try copyTable(dbi, txn, from: startingAt[name], rewriter: rewriting[name]?(), into: file, &report)
            try file.endTable()
        }
    }

    /// Flags LMDB keeps with a database (those a copy must give its own).
    private static let persistentFlags = UInt32(MDB_REVERSEKEY | MDB_INTEGERKEY)

    private static func openSource(_ name: String, _ txn: borrowing Transaction) throws -> (MDB_dbi, UInt32) {
        var dbi: MDB_dbi = 0
        try check(mdb_dbi_open(txn.pointer, name, 0, &dbi))
        var flags: UInt32 = 0
        try check(mdb_dbi_flags(txn.pointer, dbi, &flags))
        // A page file lays out no sorted duplicates (LMDB keeps them in sub-pages and
        // sub-trees); with no such table to copy, it is refused rather than written untested.
        if flags & UInt32(MDB_DUPSORT) != 0 { throw LMDBError.incompatible }
        return (dbi, flags & persistentFlags)
    }

    /// Copies one table in key order from `start` into the page file, each
    /// entry as it is or through `rewriter`.
    private static func copyTable(_ dbi: MDB_dbi, _ txn: borrowing Transaction, from start: [UInt8]?,
                                  rewriter: (any EntryRewriter)?, into file: PageFileWriter, _ report: inout Report) throws {
        var sourceCursor: OpaquePointer?
        try check(mdb_cursor_open(txn.pointer, dbi, &sourceCursor))
        guard let sourceCursor else { throw LMDBError.badTransaction }
        defer { mdb_cursor_close(sourceCursor) }
        var written = 0, taken = 0
        let put = { (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws in
            try file.append(key, value)
            written += 1
        }
        var rewriter = rewriter
        var k = MDB_val(), v = MDB_val()
        var rc = seek(sourceCursor, to: start, &k, &v)
        while rc == 0 {
            let key = UnsafeRawBufferPointer(start: k.mv_data, count: k.mv_size)
            let value = UnsafeRawBufferPointer(start: v.mv_data, count: v.mv_size)
            if rewriter != nil { try rewriter!.take(key: key, value: value, write: put) } else { try put(key, value) }
            taken += 1
            rc = mdb_cursor_get(sourceCursor, &k, &v, MDB_NEXT)
        }
        if rc != MDB_NOTFOUND { try check(rc) }
        try rewriter?.finish(write: put)
        report.entries += written
        var stat = MDB_stat()
        try check(mdb_stat(txn.pointer, dbi, &stat))
        report.skipped += max(0, stat.ms_entries - taken)
    }

    /// Puts `cursor` on the first entry at or after `start` (the table's first without one).
    private static func seek(_ cursor: OpaquePointer, to start: [UInt8]?, _ k: inout MDB_val, _ v: inout MDB_val) -> Int32 {
        guard let start else { return mdb_cursor_get(cursor, &k, &v, MDB_FIRST) }
        return start.withUnsafeBytes { s in
            k = MDB_val(mv_size: s.count, mv_data: UnsafeMutableRawPointer(mutating: s.baseAddress))
            return mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE)
        }
    }

    private static func forEachMainEntry(_ txn: borrowing Transaction, _ body: (UnsafeRawBufferPointer) -> Void) throws {
        var cursor: OpaquePointer?
        try check(mdb_cursor_open(txn.pointer, 1, &cursor))  // MAIN_DBI: the table of tables
        guard let cursor else { throw LMDBError.badTransaction }
        defer { mdb_cursor_close(cursor) }
        var k = MDB_val(), v = MDB_val()
        var rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST)
        while rc == 0 {
            body(UnsafeRawBufferPointer(start: k.mv_data, count: k.mv_size))
            rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
        }
        if rc != MDB_NOTFOUND { try check(rc) }
    }
}
