import Foundation
import LMDB
import Projections
import SubscriptionLog
import Synchronization

extension TopicStore {
    /// Commits failing for want of storage or because the store is damaged, and
    /// since when (nil once one succeeds).
    public struct WriteFailure: Sendable, Hashable {
        public var since: Date
        public var error: String
        public var failedCommits: Int
        /// What is damaged (`StoreError.damaged`'s `what`) when that is why they fail;
        /// nil when the disk is full.
        public var damaged: String? = nil
    }

    /// Set while the store's commits fail for want of storage (a full disk) or on
    /// damage, cleared by the next commit that succeeds: what a health check reports.
    public var writeFailure: WriteFailure? { failing.withLock { $0 } }

    /// `error` as the caller should see it: ENOSPC, or a write LMDB cut short (it says
    /// EIO) on a filesystem with (almost) no space left, is `StoreError.storageFull`
    /// naming the directory; anything else is left as it is.
    static func diagnosed(_ error: any Error, directory: String) -> any Error {
        if let damage = damage(in: error, directory: directory) { return damage }
        return storageFull(error, directory: directory)
    }

    /// `error` as `StoreError.storageFull` naming `directory` when it is a write that
    /// failed for want of room (see `diagnosed`); anything else is left as it is. For
    /// a store being built (a rebuild's, an import's), whose faults are its source's.
    package static func storageFull(_ error: any Error, directory: String) -> any Error {
        guard let code = error as? LMDBError else { return error }
        let full = code.rawValue == ENOSPC || code.rawValue == EDQUOT
        guard full || code.rawValue == EIO else { return error }
        var fs = statvfs()
        let free = statvfs(directory, &fs) == 0 ? Int(fs.f_bavail) * Int(fs.f_frsize) : Int.max
        guard full || free < 4 << 20 else { return error }
        return StoreError.storageFull(path: directory, reported: code.description)
    }

    /// `error` as `StoreError.damaged` when it says the store's file is damaged: a
    /// projection value that cannot be right (naming its table and key), projections
    /// not at the log's end (`meta/appliedSeq`), a log record that does not decode, a
    /// table record with impossible counts, or LMDB meeting a page that is not what
    /// its tree says. nil for anything else.
    public static func damage(in error: any Error, directory: String) -> StoreError? {
        switch error {
        case let e as StoreError:
            if case .damaged = e { return e }
            return nil
        case let e as ProjectionCorruption:
            return .damaged(path: directory, what: e.place, reason: e.reason)
        case FoldError.outOfOrder(let expected, let got):
            // The fold is handed the record after the log's last; it expected the one after the projections'.
            return .damaged(path: directory, what: "meta/appliedSeq",
                            reason: "the projections are at seq \(expected &- 1), but the log ends at seq \(got &- 1): one of them is damaged")
        case let e as RecordCorruption:
            return .damaged(path: directory, what: "log/\(e.sequence)", reason: "\(e)")
        case let e as DamagedTableRecord:
            return .damaged(path: directory, what: "the record of table \(e.table)", reason: e.reason)
        case let e as LMDBError where e.meansDamagedFile:
            return .damaged(path: directory, what: "data.mdb", reason: "LMDB: \(e)")
        default:
            return nil
        }
    }

    /// Records how a commit ended, for `writeFailure`.
    func noteCommit(failedWith error: (any Error)?) {
        guard let error else { return failing.withLock { $0 = nil } }
        var damaged: String?
        switch error {
        case StoreError.storageFull: damaged = nil
        case StoreError.damaged(_, let what, _): damaged = what
        default: return
        }
        failing.withLock { f in
            if f == nil { f = WriteFailure(since: Date(), error: "\(error)", failedCommits: 0) }
            f!.failedCommits += 1
            f!.error = "\(error)"
            f!.damaged = damaged
        }
    }
}
