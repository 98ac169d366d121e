/// Why a store could not be opened or used.
public enum StoreError: Error, Sendable, CustomStringConvertible {
    /// The directory holds no topicstore database (and may not become one).
    case notADatabase(path: String, reason: String)
    /// The database was written by a newer or unknown schema.
    case unsupportedSchema(path: String, version: UInt32)
    /// The store was opened read-only.
    case readOnly
    /// The store is closing and takes no more commands.
    case closed
    /// The store is already open in this process: share that TopicStore (LMDB
    /// must not have one environment open twice in a process).
    case alreadyOpen(path: String)
    /// The database file was deleted while the store had it open: what is
    /// written now would be lost, so nothing more is acknowledged.
    case removed(path: String)
    /// A commit could not be written because the filesystem holding the store is
    /// full (LMDB reports a short write as an I/O error): nothing of it was committed.
    case storageFull(path: String, reported: String)
    /// The log's last record is damaged: the next record must extend its chain
    /// link, which cannot be trusted, so no event is accepted.
    case corruptHead(path: String, sequence: UInt64, reason: String)
    /// The store's file is damaged where a command needed it: `what` names the
    /// table and key (`projects/alpha`, `meta/appliedSeq`) or the file (`data.mdb`).
    case damaged(path: String, what: String, reason: String)
    /// The store holds projections and no log (`replay --projections-only`): nothing
    /// to audit, export or show history from, and no log to append to.
    case projectionsOnly(path: String, sequence: UInt64)

    public var description: String {
        switch self {
        case .notADatabase(let path, let reason): return "\(path) is not a topicstore database: \(reason)"
        case .unsupportedSchema(let path, let v): return "\(path) has schema version \(v), which this topicstore does not know"
        case .readOnly: return "the store is open read-only"
        case .closed: return "the store is closed"
        case .alreadyOpen(let path): return "the store at \(path) is already open in this process; share the open TopicStore"
        case .storageFull(let path, let reported):
            return "the filesystem holding \(path) is full (\(reported)): the commit was not written, nothing of it is stored; free space and retry"
        case .corruptHead(let path, let seq, let reason):
            return "log record \(seq) of \(path), at the log's end, is damaged (\(reason)): the next record's chain link is computed "
                + "through it, so no new event can be chained on and the store takes none; "
                + "topicstore audit --data \(path) reports it (to keep the records before it: "
                + "topicstore export --to-seq \(seq - 1), then import that into a new store)"
        case .damaged(let path, let what, let reason):
            // A damaged log record stops a replay there too: what can be kept is the log before it.
            if what.hasPrefix("log/"), let seq = UInt64(what.dropFirst(4)), seq > 1 {
                return "the store at \(path) is damaged: \(what): \(reason); topicstore audit --data \(path) locates the damage "
                    + "(restore the store from a backup, or keep the records before it: topicstore replay --data \(path) "
                    + "--to-seq \(seq - 1) --out NEWDIR)"
            }
            return "the store at \(path) is damaged: \(what): \(reason); topicstore audit --data \(path) locates the damage "
                + "(restore the store from a backup, or replay its log into a new directory)"
        case .projectionsOnly(let path, let seq):
            return "\(path) holds projections only (as of seq \(seq)) and no log, as replay --projections-only writes them: "
                + "audience, topics and device read it, but there is no log to audit, export, replay or show history from, "
                + "and it takes no new events (they would start a log at seq \(seq + 1) over projections that are not its fold); "
                + "replay without --projections-only writes a complete store"
        case .removed(let path):
            return "the database file \(path)/data.mdb was removed while the store was open: commands written now would be lost, so none is acknowledged; restore the directory or restart on a new one"
        }
    }
}
