internal import CLMDB
import Glibc

/// The two meta pages at the head of an environment's data file, mapped on
/// their own and read-only: LMDB's newest committed transaction id, read with
/// no transaction, no system call and no lock.
///
/// `Environment.lastTransactionID` reads the same pages through the
/// environment's map, which moves when the map is resized, so its callers hold
/// a lock that keeps resizes out. This mapping never moves. It sees every
/// commit as LMDB's own readers do (the meta page is written through the file or
/// the shared map, one page cache). `detach()` puts zeros in its place, letting
/// go of the file, while threads may still be reading it.
public final class MetaPages: @unchecked Sendable {
    private let base: UnsafeMutableRawPointer
    private let pageSize: Int

    /// Maps the meta pages of `environment`'s data file; nil when it cannot.
    public init?(_ environment: Environment) {
        var fd: mdb_filehandle_t = -1
        let pageSize = environment.info().pageSize
        guard mdb_env_get_fd(environment.pointer, &fd) == 0, fd >= 0, pageSize >= 512,
              let mapped = mmap(nil, 2 * pageSize, PROT_READ, MAP_SHARED, fd, 0), mapped != MAP_FAILED
        else { return nil }
        base = mapped
        self.pageSize = pageSize
    }

    deinit { munmap(base, 2 * pageSize) }

    /// The newest committed transaction's id: the greater of the two meta
    /// pages' (as `mdb_env_pick_meta` picks); nil when either page holds no meta
    /// page (detached).
    @inline(__always)
    public var lastTransactionID: Int? {
        let first = UnsafeRawPointer(base) + DataFile.pageHeader, second = first + pageSize
        guard UInt32(littleEndian: first.load(as: UInt32.self)) == DataFile.metaMagic,
              UInt32(littleEndian: second.load(as: UInt32.self)) == DataFile.metaMagic else { return nil }
        let a = UInt64(littleEndian: first.load(fromByteOffset: Self.transactionIDOffset, as: UInt64.self))
        let b = UInt64(littleEndian: second.load(fromByteOffset: Self.transactionIDOffset, as: UInt64.self))
        return Int(truncatingIfNeeded: max(a, b))
    }

    /// Where a meta page's transaction id is, from its start after the page header (`DataFile.meta`).
    private static let transactionIDOffset = 128

    /// Replaces the mapping, in place, with zeros: readers find no meta page from
    /// now on, and the data file (perhaps retired, to be deleted) is let go.
    public func detach() {
        _ = mmap(base, 2 * pageSize, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0)
    }
}
