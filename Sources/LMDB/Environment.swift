internal import CLMDB
internal import CLMDBKeys
import Foundation

/// An LMDB environment: one memory-mapped file holding named databases.
///
/// Thread-safe as LMDB is: open it once per process and share it. Readers are
/// opened with `MDB_NOTLS` so a read transaction is not tied to a thread slot.
public final class Environment: @unchecked Sendable {
    public struct Options: Sendable {
        public var mapSize: Int = 1 << 30
        public var maxDatabases: UInt32 = 16
        public var maxReaders: UInt32 = 256
        public var readOnly = false
        /// Weaker durability: commits are not fsynced (`MDB_NOSYNC`). Never the default.
        public var noSync = false
        /// Writes go straight into the shared map (`MDB_WRITEMAP`) instead of
        /// through malloc'd page copies and pwrite; commits msync. Same durability.
        public var writeMap = false
        public init() {}
    }

    let pointer: OpaquePointer
    public let path: String
    public let isReadOnly: Bool
    private let registeredPath: String

    /// Paths of the environments open in this process. LMDB forbids opening one
    /// environment twice in a process: its locks are per process, and closing
    /// either copy can destroy the shared mutexes under the other.
    private static let openPaths = OpenPaths()

    /// A set of paths behind an `NSLock` (a pthread mutex), not a
    /// `Synchronization.Mutex`: ThreadSanitizer does not follow the futex under
    /// the latter and reported every concurrent open as a race.
    private final class OpenPaths: @unchecked Sendable {
        private let lock = NSLock()
        private var paths = Set<String>()
        func insert(_ path: String) -> Bool { lock.withLock { paths.insert(path).inserted } }
        func remove(_ path: String) { lock.withLock { _ = paths.remove(path) } }
    }

    public init(path: String, options: Options = Options()) throws {
        let canonical = URL(fileURLWithPath: path).standardizedFileURL.resolvingSymlinksInPath().path
        let inserted = Self.openPaths.insert(canonical)
        guard inserted else { throw LMDBError.alreadyOpen }
        registeredPath = canonical
        var env: OpaquePointer?
        do {
            try check(mdb_env_create(&env))
        } catch {
            Self.openPaths.remove(canonical)
            throw error
        }
        guard let env else { Self.openPaths.remove(canonical); throw LMDBError.invalid }
        var flags = UInt32(MDB_NOTLS)
        if options.readOnly { flags |= UInt32(MDB_RDONLY) }
        if options.noSync { flags |= UInt32(MDB_NOSYNC) }
        if options.writeMap && !options.readOnly { flags |= UInt32(MDB_WRITEMAP) }
        do {
            try check(mdb_env_set_maxdbs(env, MDB_dbi(options.maxDatabases)))
            try check(mdb_env_set_maxreaders(env, options.maxReaders))
            try check(mdb_env_set_mapsize(env, options.mapSize))
        } catch {
            mdb_env_close(env)
            Self.openPaths.remove(canonical)
            throw error
        }
        // An existing empty data.mdb is refused before LMDB sees it: LMDB takes an empty file
        // for a new environment, and a writer would write fresh meta pages into it. (Another
        // process creating the environment this moment has its data.mdb empty for as long as
        // one write takes; opening beside a creation is not otherwise safe either.)
        let dataPath = path + "/data.mdb"
        var data = stat()
        let dataExisted = stat(dataPath, &data) == 0
        if dataExisted && data.st_size == 0 {
            mdb_env_close(env)
            Self.openPaths.remove(canonical)
            throw EmptyDataFile(file: dataPath)
        }
        let createdLock: Bool
        do {
            createdLock = try Self.allocateLockFile(in: path, readers: options.maxReaders)
        } catch {
            mdb_env_close(env)
            Self.openPaths.remove(canonical)
            throw error
        }
        let opened = mdb_env_open(env, path, flags, Self.dataFileMode)
        if opened != 0 {
            mdb_env_close(env)
            Self.openPaths.remove(canonical)
            // A new environment that failed (a full disk, say) leaves nothing behind: a
            // lock.mdb or a half-written data.mdb would make the directory look taken. A
            // data.mdb with both meta pages is someone's (another process made it meanwhile).
            var made = stat()
            if !dataExisted, stat(dataPath, &made) == 0, made.st_size < 2 * 4096 { unlink(dataPath) }
            if createdLock, access(dataPath, F_OK) != 0 { unlink(path + "/lock.mdb") }
            if dataExisted, opened == MDB_INVALID, let cut = DataFile.truncatedMetaPages(dataPath) { throw cut }
            if dataExisted, opened == MDB_INVALID, let damaged = DataFile.invalidMetaPage(dataPath) { throw damaged }
            if dataExisted, let damaged = DataFile.impossibleMeta(dataPath) { throw damaged }
            throw Self.openError(path, code: LMDBError(rawValue: opened), readOnly: options.readOnly)
        }
        self.pointer = env
        self.path = path
        self.isReadOnly = options.readOnly
        // LMDB opens the data file without close-on-exec: a child a process starts
        // (Foundation's `Process` only closes what was open when it prepared the spawn)
        // would keep it open, and with it the disk space of a generation compaction removes.
        var dataFD: mdb_filehandle_t = -1
        if mdb_env_get_fd(env, &dataFD) == 0, dataFD >= 0 {
            let flags = fcntl(dataFD, F_GETFD)
            if flags >= 0 { _ = fcntl(dataFD, F_SETFD, flags | FD_CLOEXEC) }
        }
        // Before any page is read through the map (refused, deinit closes the environment).
        try checkDataFileLength(sizeBeforeOpen: options.writeMap && !options.readOnly && dataExisted ? Int(data.st_size) : nil)
    }

    /// Gives lock.mdb its disk blocks before LMDB maps it. LMDB sizes the file with
    /// `ftruncate`, which allocates nothing, and then writes its reader table through
    /// the map: on a full filesystem that store faults (SIGBUS, the process dies and
    /// leaves a lock.mdb without a data.mdb). Allocated here, a full disk is an error
    /// that names the file (ENOSPC), and the lock file this call made is removed again.
    /// Made by root beside another user's data.mdb, the file is given to that user,
    /// whose server must write to it. A lock file this process may not write, or a
    /// filesystem without `posix_fallocate`, is left to LMDB as before.
    /// Returns whether it created the file.
    static func allocateLockFile(in directory: String, readers: UInt32) throws -> Bool {
        let lockPath = directory + "/lock.mdb"
        var info = stat()
        let existed = stat(lockPath, &info) == 0
        let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, Self.lockFileMode)
        guard fd >= 0 else { return false }
        defer { Glibc.close(fd) }
        // LMDB's table: a header and one 64-byte slot per reader; a page to spare.
        let needed = (Int(readers) * 64 + 2 * 4096 + 4095) & ~4095
        let size = max(existed ? Int(info.st_size) : 0, needed)
        let rc = posix_fallocate(fd, 0, off_t(size))
        if rc == ENOSPC || rc == EDQUOT {
            if !existed { unlink(lockPath) }
            throw EnvironmentOpenError(directory: directory, file: "lock.mdb", creating: !existed,
                                       code: LMDBError(rawValue: rc), reason: LMDBError(rawValue: rc))
        }
        var data = stat()
        if !existed, geteuid() == 0, stat(directory + "/data.mdb", &data) == 0, data.st_uid != 0 {
            _ = fchown(fd, data.st_uid, data.st_gid)
        }
        return !existed
    }

    /// Names the file behind a failed `mdb_env_open`: tries the files again in
    /// LMDB's order (a writer opens lock.mdb then data.mdb, creating them; a
    /// reader opens data.mdb read-only, then lock.mdb read-write), without
    /// creating anything. Called after `mdb_env_close`, so closing a probe
    /// cannot drop a lock this process holds.
    static func openError(_ directory: String, code: LMDBError, readOnly: Bool) -> EnvironmentOpenError {
        // LMDB's own codes are negative; only an errno comes from opening a file.
        guard code.rawValue > 0 else { return EnvironmentOpenError(directory: directory, file: nil, creating: false, code: code, reason: code) }
        let files: [(name: String, write: Bool, create: Bool)] = readOnly
            ? [("data.mdb", false, false), ("lock.mdb", true, true)]
            : [("lock.mdb", true, true), ("data.mdb", true, true)]
        for file in files {
            let path = directory + "/" + file.name
            var info = stat()
            if stat(path, &info) == 0 {
                let fd = open(path, (file.write ? O_RDWR : O_RDONLY) | O_CLOEXEC)
                if fd < 0 {
                    return EnvironmentOpenError(directory: directory, file: file.name, creating: false, code: code, reason: LMDBError(rawValue: errno))
                }
                Glibc.close(fd)
            } else if errno == ENOENT && file.create {
                if access(directory, W_OK | X_OK) != 0 {
                    return EnvironmentOpenError(directory: directory, file: file.name, creating: true, code: code, reason: LMDBError(rawValue: errno))
                }
            } else {
                return EnvironmentOpenError(directory: directory, file: file.name, creating: false, code: code, reason: LMDBError(rawValue: errno))
            }
        }
        return EnvironmentOpenError(directory: directory, file: nil, creating: false, code: code, reason: code)
    }

    /// Set by `close()`.
    private var closed = false

    deinit { close() }

    /// Closes the environment before its last reference goes, so that its files
    /// can be replaced and opened again under the same path (a rebuild lays out
    /// its new data file itself: `PageFileWriter`). Only for its one owner: no
    /// transaction may be open, and nothing may use the environment after.
    public func close() {
        guard !closed else { return }
        closed = true
        mdb_env_close(pointer)
        Self.openPaths.remove(registeredPath)
    }

    /// Clears reader slots left by dead processes; returns how many were cleared.
    @discardableResult
    public func checkReaders() throws -> Int {
        var dead: Int32 = 0
        try check(mdb_reader_check(pointer, &dead))
        return Int(dead)
    }

    /// A slot of the reader table (lock.mdb): the process that holds it and the
    /// snapshot its read transaction pins (nil: the slot is free of a transaction).
    public struct ReaderSlot: Sendable, Hashable {
        public var pid: Int32
        public var transactionID: Int?
    }

    /// The reader table's slots in use, as `mdb_reader_list` reports them.
    public func readerSlots() throws -> [ReaderSlot] {
        final class Lines { var text = "" }
        let lines = Lines()
        let rc = withExtendedLifetime(lines) {
            mdb_reader_list(pointer, { message, context in
                guard let message, let context else { return 0 }
                Unmanaged<Lines>.fromOpaque(context).takeUnretainedValue().text += String(cString: message)
                return 0
            }, Unmanaged.passUnretained(lines).toOpaque())
        }
        guard rc >= 0 else { throw LMDBError(rawValue: rc) }
        // "    pid     thread     txnid" then "%10d %zx %s" per slot ("-" without a transaction).
        return lines.text.split(separator: "\n").dropFirst().compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count == 3, let pid = Int32(fields[0]) else { return nil }
            return ReaderSlot(pid: pid, transactionID: Int(fields[2]))
        }
    }

    public struct Info: Sendable {
        public var mapSize: Int
        public var lastPage: Int
        public var pageSize: Int
        public var lastTransactionID: Int
        public var readersInUse: Int
        /// Bytes of the map that hold pages (the high-water mark of the file). An
        /// environment refuses a meta page whose count overflows this (`DamagedMetaPage`);
        /// should another process's meta page be damaged later, it saturates, never traps.
        public var usedBytes: Int {
            let (pages, wrapped) = lastPage.addingReportingOverflow(1)
            let (bytes, overflow) = pages.multipliedReportingOverflow(by: pageSize)
            return wrapped || overflow || lastPage < 0 ? .max : bytes
        }
    }

    public func info() -> Info {
        var info = MDB_envinfo()
        var stat = MDB_stat()
        mdb_env_info(pointer, &info)
        mdb_env_stat(pointer, &stat)
        return Info(mapSize: info.me_mapsize, lastPage: info.me_last_pgno,
                    pageSize: Int(stat.ms_psize), lastTransactionID: info.me_last_txnid,
                    readersInUse: Int(info.me_numreaders))
    }

    /// The id of the newest committed transaction, read from the meta pages with no
    /// transaction and no system call: what a reader may compare with the id of a
    /// snapshot it holds answers for. Read it where the map cannot be resized meanwhile.
    public var lastTransactionID: Int {
        var info = MDB_envinfo()
        mdb_env_info(pointer, &info)
        return info.me_last_txnid
    }

    /// Whether the database file was removed (unlinked) while open: LMDB goes
    /// on writing into the removed file, which nothing will open again.
    public var fileWasRemoved: Bool {
        var fd: mdb_filehandle_t = -1
        guard mdb_env_get_fd(pointer, &fd) == 0, fd >= 0 else { return false }
        var st = stat()
        return fstat(fd, &st) == 0 && st.st_nlink == 0
    }

    /// Sets the map size. Only legal while this process has no transaction
    /// open; a size of 0 adopts the size another process has grown the map to.
    public func setMapSize(_ bytes: Int) throws {
        try check(mdb_env_set_mapsize(pointer, bytes))
    }

    /// Flushes buffers to disk (useful only with `noSync`).
    public func sync(force: Bool = true) throws {
        try check(mdb_env_sync(pointer, force ? 1 : 0))
    }

    /// Copies the environment to a directory; `compact` omits free pages.
    public func copy(to directory: String, compact: Bool) throws {
        try check(mdb_env_copy2(pointer, directory, compact ? UInt32(MDB_CP_COMPACT) : 0))
        chmod(directory + "/data.mdb", Self.dataFileMode)  // LMDB makes the copy 0666 less the umask
    }

    /// A store holds API key hashes and the providers' private keys (APNs .p8, FCM service
    /// accounts): data.mdb is readable by its owner and group only, never by everyone. The
    /// lock file is written by every reader, so the group may write it (both less the umask).
    public static let dataFileMode: UInt32 = 0o640
    static let lockFileMode: UInt32 = 0o660

    // MARK: Transactions

    /// Runs `body` in a read-only transaction that sees one consistent snapshot.
    public func read<R>(_ body: (borrowing Transaction) throws -> R) throws -> R {
        let txn = try Transaction(environment: self, readOnly: true)
        let result: R
        do {
            result = try body(txn)
        } catch {
            txn.abort()
            throw error
        }
        txn.abort()
        return result
    }

    /// Runs `body` in a write transaction and commits when it returns.
    /// If `body` throws, the transaction is aborted and nothing is written.
    public func write<R>(_ body: (borrowing Transaction) throws -> R) throws -> R {
        let txn = try Transaction(environment: self, readOnly: false)
        let result: R
        do {
            result = try body(txn)
        } catch {
            txn.abort()
            throw error
        }
        try txn.commit()
        return result
    }

    /// Opens (with `create`, creates) named databases in one transaction and
    /// commits it, so the handles stay valid for the environment's life (LMDB
    /// closes handles opened in a transaction that is aborted). A missing
    /// database without `create` throws `LMDBError.notFound`.
    public func openDatabases(_ names: [String], create: Bool) throws -> [Database] {
        let txn = try Transaction(environment: self, readOnly: !create)
        var result: [Database] = []
        do {
            for name in names {
                var dbi: MDB_dbi = 0
                try check(mdb_dbi_open(txn.pointer, name, create ? UInt32(MDB_CREATE) : 0, &dbi))
                try orderKeysFast(txn.pointer, dbi)
                result.append(Database(handle: dbi, name: name))
            }
        } catch {
            txn.abort()
            throw error
        }
        try txn.commit()
        return result
    }
}

/// A handle on a named database inside an environment.
public struct Database: Sendable, Hashable {
    let handle: UInt32
    public let name: String
}

/// Gives handle `dbi` topicstore's comparison of keys (`topicstore_key_order`:
/// LMDB's default order, computed eight bytes at a time) where the database
/// uses the default, byte-wise order; a database of integer or reversed keys
/// keeps LMDB's own. Set once per handle, before it is read (the handle's
/// comparison is the environment's, for every transaction after).
func orderKeysFast(_ txn: OpaquePointer, _ dbi: MDB_dbi) throws {
    var flags: UInt32 = 0
    try check(mdb_dbi_flags(txn, dbi, &flags))
    if flags & UInt32(MDB_INTEGERKEY | MDB_REVERSEKEY) != 0 { return }
    try check(mdb_set_compare(txn, dbi, topicstore_key_order))
}
