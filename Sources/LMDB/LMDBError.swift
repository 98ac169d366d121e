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
    /// Lets `catch LMDBError.mapFull` match a thrown `any Error`.
    public static func ~= (pattern: LMDBError, error: any Error) -> Bool {
        (error as? LMDBError) == pattern
    }
}
