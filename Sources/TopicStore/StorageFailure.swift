import Foundation
import LMDB
import Synchronization

extension TopicStore {
    /// Commits failing for want of storage, and since when (nil once one succeeds).
    public struct WriteFailure: Sendable, Hashable {
        public var since: Date
        public var error: String
        public var failedCommits: Int
    }

    /// Set while the store's commits fail for want of storage (a full disk), cleared
    /// by the next commit that succeeds: what a health check reports.
    public var writeFailure: WriteFailure? { failing.withLock { $0 } }

    /// `error` as the caller should see it: ENOSPC, or a write LMDB cut short (it says
    /// EIO) on a filesystem with (almost) no space left, is `StoreError.storageFull`
    /// naming the directory; anything else is left as it is.
    static func diagnosed(_ error: any Error, directory: String) -> any Error {
        guard let code = error as? LMDBError else { return error }
        let full = code.rawValue == ENOSPC || code.rawValue == EDQUOT
        guard full || code.rawValue == EIO else { return error }
        var fs = statvfs()
        let free = statvfs(directory, &fs) == 0 ? Int(fs.f_bavail) * Int(fs.f_frsize) : Int.max
        guard full || free < 4 << 20 else { return error }
        return StoreError.storageFull(path: directory, reported: code.description)
    }

    /// Records how a commit ended, for `writeFailure`.
    func noteCommit(failedWith error: (any Error)?) {
        guard let error else { return failing.withLock { $0 = nil } }
        guard case StoreError.storageFull = error else { return }
        failing.withLock { f in
            if f == nil { f = WriteFailure(since: Date(), error: "\(error)", failedCommits: 0) }
            f!.failedCommits += 1
            f!.error = "\(error)"
        }
    }
}
