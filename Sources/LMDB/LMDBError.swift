internal import CLMDB

/// An error code returned by LMDB (or an errno passed through by it).
///
/// An open struct rather than a closed enum, as in swift-system's `Errno`:
/// LMDB may return codes this wrapper does not name.
public struct LMDBError: Error, RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }

    public static let keyExists = LMDBError(rawValue: MDB_KEYEXIST)
    public static let notFound = LMDBError(rawValue: MDB_NOTFOUND)
    public static let corrupted = LMDBError(rawValue: MDB_CORRUPTED)
    public static let pageNotFound = LMDBError(rawValue: MDB_PAGE_NOTFOUND)
    public static let panic = LMDBError(rawValue: MDB_PANIC)
    public static let versionMismatch = LMDBError(rawValue: MDB_VERSION_MISMATCH)
    public static let invalid = LMDBError(rawValue: MDB_INVALID)
    public static let mapFull = LMDBError(rawValue: MDB_MAP_FULL)
    public static let databasesFull = LMDBError(rawValue: MDB_DBS_FULL)
    public static let readersFull = LMDBError(rawValue: MDB_READERS_FULL)
    public static let transactionFull = LMDBError(rawValue: MDB_TXN_FULL)
    public static let mapResized = LMDBError(rawValue: MDB_MAP_RESIZED)
    public static let badTransaction = LMDBError(rawValue: MDB_BAD_TXN)
    public static let badValueSize = LMDBError(rawValue: MDB_BAD_VALSIZE)
    public static let incompatible = LMDBError(rawValue: MDB_INCOMPATIBLE)
    public static let noSuchFileOrDirectory = LMDBError(rawValue: 2) // ENOENT
    public static let permissionDenied = LMDBError(rawValue: 13)     // EACCES
    public static let wouldBlock = LMDBError(rawValue: 11)           // EAGAIN: lock held
    /// This wrapper's own refusal: the environment is already open in this process.
    public static let alreadyOpen = LMDBError(rawValue: 16)          // EBUSY

    public var description: String {
        if self == .alreadyOpen { return "the environment is already open in this process (share the open one) (\(rawValue))" }
        guard let text = mdb_strerror(rawValue) else { return "LMDB error \(rawValue)" }
        return String(cString: text) + " (\(rawValue))"
    }
}

/// Calls an LMDB function and turns a non-zero return into a thrown `LMDBError`.
@inline(__always)
func check(_ code: Int32) throws {
    if code != 0 { throw LMDBError(rawValue: code) }
}

extension LMDBError {
    /// Lets `catch LMDBError.mapFull` match a thrown `any Error` (an
    /// `EnvironmentOpenError` matches its code).
    public static func ~= (pattern: LMDBError, error: any Error) -> Bool {
        ((error as? LMDBError) ?? (error as? EnvironmentOpenError)?.code) == pattern
    }

    /// Codes LMDB returns when a page it reads is not what the tree says it is
    /// (a page number past the file, a page of the wrong kind, a transaction left
    /// invalid by either): a damaged file, not a failure of the run.
    public var meansDamagedFile: Bool { self == .corrupted || self == .pageNotFound || self == .badTransaction }

    /// The message without the number.
    var text: String {
        guard let text = mdb_strerror(rawValue) else { return "LMDB error \(rawValue)" }
        return String(cString: text)
    }
}

/// An environment that `mdb_env_open` refused, with where: LMDB's own error
/// is only an errno ("Permission denied (13)"), which leaves an operator to
/// guess which directory, and which of its two files, is at fault.
public struct EnvironmentOpenError: Error, Sendable, CustomStringConvertible {
    /// The environment's directory.
    public let directory: String
    /// `lock.mdb` or `data.mdb` when one of them could not be opened or created.
    public let file: String?
    /// Whether the file was missing and could not be created (the directory refused it).
    public let creating: Bool
    /// Why, as LMDB said it.
    public let code: LMDBError
    /// The errno found when the file was tried again (usually `code`).
    let reason: LMDBError

    public var description: String {
        guard let file else { return "cannot open the LMDB environment in \(directory): \(code.text)" }
        var text = "cannot \(creating ? "create" : "open") \(directory)/\(file): \(reason.text)"
        if file == "lock.mdb" && reason == .permissionDenied {
            text += " (LMDB readers write to lock.mdb too, so even read-only commands need write access to it"
                + (creating ? " and to create it in the directory)" : ")")
        }
        return text
    }
}

/// A table's record in the table of tables (its page and entry counts) that no
/// store could hold: damaged. `audit` walks the file and says where.
public struct DamagedTableRecord: Error, Sendable, CustomStringConvertible {
    /// The table's name.
    public let table: String
    public let reason: String
    public init(table: String, reason: String) {
        self.table = table
        self.reason = reason
    }
    public var description: String { "the record of table \(table) in data.mdb's table of tables is damaged: \(reason)" }
}
