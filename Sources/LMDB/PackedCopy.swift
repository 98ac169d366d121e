internal import CLMDB
import Foundation

/// A copy of an environment with every page full.
///
/// LMDB's compacting copy (`Environment.copy(to:compact: true)`) leaves out
/// free pages but copies the pages in use as they are: a table changed in
/// random key order for months keeps leaves about half full, and so does every
/// copy of it (a soak of nights of churn, each compacted, saw the devices table
/// grow from 158 to 337 bytes a device at the same 100,000 devices). This copy
/// writes each entry again, table by table in key order with `MDB_APPEND`,
/// which fills every leaf before it starts the next: the pages come out full.
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
    /// reading it). The new file is synced before this returns. The new map is the
    /// source's (or `mapSize`), doubled whenever it fills.
    ///
    /// Every database must already be open in the process (`Environment.openDatabases`,
    /// in a committed transaction): a handle opened in a read transaction closes
    /// again when it ends, under any other user of it. `databaseNames` on a
    /// committed transaction before, and the same names seen by `txn`, make sure.
    public static func write(_ txn: borrowing Transaction, of source: Environment, to directory: String,
                             startingAt: [String: [UInt8]] = [:], rewriting: [String: @Sendable () -> any EntryRewriter] = [:],
                             entriesPerTransaction: Int = 200_000, mapSize: Int? = nil) throws -> Report {
        let names = try databaseNames(txn)
        var options = Environment.Options()
        options.mapSize = mapSize ?? max(source.info().mapSize, 1 << 20)
        options.maxDatabases = UInt32(max(names.count + 1, 16))
        options.noSync = true  // synced once, at the end
        var report = Report()
        do {
            let target = try Environment(path: directory, options: options)
            for name in names {
                let (dbi, flags) = try openSource(name, txn)
                if let rewriter = rewriting[name] {
                    try rewriteTable(name, dbi: dbi, flags: flags, txn, into: target, from: startingAt[name],
                                     perTransaction: max(entriesPerTransaction, 1), rewriter, &report)
                } else {
                    try copyTable(name, dbi: dbi, flags: flags, txn, into: target, from: startingAt[name],
                                  perTransaction: max(entriesPerTransaction, 1), &report)
                }
            }
            try target.sync(force: true)
        }
        chmod(directory + "/data.mdb", Environment.dataFileMode)
        var st = stat()
        if stat(directory + "/data.mdb", &st) == 0 { report.fileBytes = Int(st.st_size) }
        return report
    }

    /// Flags LMDB keeps with a database (those a copy must give its own).
    private static let persistentFlags = UInt32(MDB_REVERSEKEY | MDB_INTEGERKEY)

    static func openSource(_ name: String, _ txn: borrowing Transaction) throws -> (MDB_dbi, UInt32) {
        var dbi: MDB_dbi = 0
        try check(mdb_dbi_open(txn.pointer, name, 0, &dbi))
        var flags: UInt32 = 0
        try check(mdb_dbi_flags(txn.pointer, dbi, &flags))
        // Appending duplicates needs MDB_APPENDDUP for a repeated key and MDB_APPEND for a new
        // one; with no such table to copy, it is refused rather than written untested.
        if flags & UInt32(MDB_DUPSORT) != 0 { throw LMDBError.incompatible }
        return (dbi, flags & persistentFlags)
    }

    /// Copies one table in key order, `perTransaction` entries per write transaction of
    /// the target. A target map that fills is doubled and the transaction done again.
    private static func copyTable(_ name: String, dbi: MDB_dbi, flags: UInt32, _ txn: borrowing Transaction,
                                  into target: Environment, from start: [UInt8]?, perTransaction: Int,
                                  _ report: inout Report) throws {
        var sourceCursor: OpaquePointer?
        try check(mdb_cursor_open(txn.pointer, dbi, &sourceCursor))
        guard let sourceCursor else { throw LMDBError.badTransaction }
        defer { mdb_cursor_close(sourceCursor) }
        let putFlags = UInt32(MDB_APPEND)

        var k = MDB_val(), v = MDB_val()
        var rc = seek(sourceCursor, to: start, &k, &v)
        try createTable(name, flags: flags, in: target)
        var copied = 0
        while rc == 0 {
            // One transaction of the target; on MDB_MAP_FULL it starts again from `batchStart`.
            let batchStartKey = Array(UnsafeRawBufferPointer(start: k.mv_data, count: k.mv_size))
            let batchStartValue = Array(UnsafeRawBufferPointer(start: v.mv_data, count: v.mv_size))
            do {
                var written = 0
                try target.write { out in
                    try withCursor(on: name, flags: flags, out) { cursorOut in
                        while rc == 0 && written < perTransaction {
                            try check(mdb_cursor_put(cursorOut, &k, &v, putFlags))
                            written += 1
                            rc = mdb_cursor_get(sourceCursor, &k, &v, MDB_NEXT)
                        }
                    }
                }
                report.entries += written
                copied += written
            } catch LMDBError.mapFull {
                try target.setMapSize(target.info().mapSize * 2)
                rc = batchStartKey.withUnsafeBytes { key in
                    batchStartValue.withUnsafeBytes { value in
                        k = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
                        v = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
                        return mdb_cursor_get(sourceCursor, &k, &v, MDB_SET_KEY)
                    }
                }
                try check(rc)
                // Key and value from the map again, not from the buffers above.
                rc = mdb_cursor_get(sourceCursor, &k, &v, MDB_GET_CURRENT)
                try check(rc)
            }
        }
        if rc != MDB_NOTFOUND { try check(rc) }
        var stat = MDB_stat()
        try check(mdb_stat(txn.pointer, dbi, &stat))
        report.skipped += max(0, stat.ms_entries - copied)
    }

    /// `copyTable` through an `EntryRewriter`: the source's entries in key order are
    /// handed to it, and what it writes is appended, `perTransaction` source entries per
    /// write transaction of the target. A target map that fills is doubled and the table
    /// written again from its start, by a new rewriter (what one holds cannot be taken back).
    private static func rewriteTable(_ name: String, dbi: MDB_dbi, flags: UInt32, _ txn: borrowing Transaction,
                                     into target: Environment, from start: [UInt8]?, perTransaction: Int,
                                     _ makeRewriter: () -> any EntryRewriter, _ report: inout Report) throws {
        var sourceCursor: OpaquePointer?
        try check(mdb_cursor_open(txn.pointer, dbi, &sourceCursor))
        guard let sourceCursor else { throw LMDBError.badTransaction }
        defer { mdb_cursor_close(sourceCursor) }
        try createTable(name, flags: flags, in: target)
        while true {
            var rewriter = makeRewriter()
            var k = MDB_val(), v = MDB_val()
            var rc = seek(sourceCursor, to: start, &k, &v)
            var taken = 0, written = 0
            do {
                var finished = false
                while !finished {
                    try target.write { out in try withCursor(on: name, flags: flags, out) { cursorOut in
                        let put = { (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws in
                            var ok = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
                            var ov = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
                            try check(mdb_cursor_put(cursorOut, &ok, &ov, UInt32(MDB_APPEND)))
                            written += 1
                        }
                        var inThis = 0
                        while rc == 0 && inThis < perTransaction {
                            try rewriter.take(key: UnsafeRawBufferPointer(start: k.mv_data, count: k.mv_size),
                                              value: UnsafeRawBufferPointer(start: v.mv_data, count: v.mv_size), write: put)
                            inThis += 1
                            rc = mdb_cursor_get(sourceCursor, &k, &v, MDB_NEXT)
                        }
                        taken += inThis
                        if rc != 0 {
                            if rc != MDB_NOTFOUND { try check(rc) }
                            try rewriter.finish(write: put)
                            finished = true
                        }
                    } }
                }
                report.entries += written
                var stat = MDB_stat()
                try check(mdb_stat(txn.pointer, dbi, &stat))
                report.skipped += max(0, stat.ms_entries - taken)
                return
            } catch LMDBError.mapFull {
                try target.setMapSize(target.info().mapSize * 2)
                try target.write { out in
                    var dbOut: MDB_dbi = 0
                    try check(mdb_dbi_open(out.pointer, name, flags, &dbOut))
                    try check(mdb_drop(out.pointer, dbOut, 0))
                }
            }
        }
    }

    /// Puts `cursor` on the first entry at or after `start` (the table's first without one).
    private static func seek(_ cursor: OpaquePointer, to start: [UInt8]?, _ k: inout MDB_val, _ v: inout MDB_val) -> Int32 {
        guard let start else { return mdb_cursor_get(cursor, &k, &v, MDB_FIRST) }
        return start.withUnsafeBytes { s in
            k = MDB_val(mv_size: s.count, mv_data: UnsafeMutableRawPointer(mutating: s.baseAddress))
            return mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE)
        }
    }

    /// `body` with a cursor on table `name` of the target's write transaction `out`.
    private static func withCursor(on name: String, flags: UInt32, _ out: borrowing Transaction,
                                   _ body: (OpaquePointer) throws -> Void) throws {
        var dbOut: MDB_dbi = 0
        try check(mdb_dbi_open(out.pointer, name, flags, &dbOut))
        var cursorOut: OpaquePointer?
        try check(mdb_cursor_open(out.pointer, dbOut, &cursorOut))
        guard let cursorOut else { throw LMDBError.badTransaction }
        defer { mdb_cursor_close(cursorOut) }
        try body(cursorOut)
    }

    /// Creates table `name` in `target` (so that a copy has it even when it is empty).
    private static func createTable(_ name: String, flags: UInt32, in target: Environment) throws {
        try target.write { out in
            var created: MDB_dbi = 0
            try check(mdb_dbi_open(out.pointer, name, UInt32(MDB_CREATE) | flags, &created))
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
