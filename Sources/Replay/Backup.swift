import Foundation
import LMDB
import SubscriptionLog
import TopicStore

/// `topicstore backup`: a consistent copy of a store, live or not, that is a store itself.
public enum Backup {
    public struct Report: Sendable {
        public var directory: String
        /// The generation copied ("" for a store without generations).
        public var generation: String
        /// The log's last record in the copy, and its chain link.
        public var head: ChainHead?
        /// The compaction snapshot copied with it (the horizon the copy's log continues from).
        public var snapshotHorizon: UInt64?
        public var bytes: UInt64
        public var seconds: Double
        /// Pages of the copy's data.mdb walked by the file check, which found nothing wrong.
        public var pagesChecked: Int
    }

    /// Copies the store into `directory`, which must be new or empty and outside the store
    /// directory: the current generation's data.mdb in one read transaction
    /// (`TopicStore.copyCurrentGeneration`), `CURRENT`, and the compaction snapshot its log
    /// continues from, if any. Then walks the copy's file page by page (`checkFileStructure`).
    /// A backup that fails removes what it wrote.
    public static func run(from store: TopicStore, into directory: String) throws -> Report {
        let started = Date()
        if Replay.samePath(directory, store.directory) { throw ReplayError.sameDirectory(directory) }
        if Replay.isInside(directory, store.directory) { throw ReplayError.insideStore(directory, store: store.directory) }
        if let names = try? FileManager.default.contentsOfDirectory(atPath: directory), !names.isEmpty {
            throw ReplayError.outputNotEmpty(directory, "it holds \(names.sorted().prefix(3).joined(separator: ", "))")
        }
        let output = OutputDirectory(directory)
        do {
            let generation = try store.copyCurrentGeneration(into: directory)
            var readOnly = TopicStore.Options()
            readOnly.readOnly = true
            let (horizon, head): (UInt64, ChainHead?) = try {
                let copy = try TopicStore(directory: directory, options: readOnly)
                defer { copy.close() }
                return (try Replay.horizon(of: copy), try copy.read { txn in try copy.chainHead(txn) })
            }()
            if horizon > 0 {
                guard let snapshot = try Snapshot.find(inStore: store.directory, horizon: horizon) else {
                    try ReplayError.checkStillCurrent(store, since: generation)  // a compaction switched since the copy
                    throw ReplayError.missingSnapshot(horizon: horizon, directory: Snapshot.directory(inStore: store.directory, horizon: horizon))
                }
                try snapshot.copy(toDirectory: Snapshot.directory(inStore: directory, horizon: horizon))
            }
            let file = try TopicStore.checkFileStructure(directory: directory)
            guard file.isSound else {
                throw ReplayError.io("the copy's data.mdb did not pass the file check: \(file.issues.first.map { "\($0)" } ?? "")")
            }
            return Report(directory: directory, generation: generation, head: head, snapshotHorizon: horizon > 0 ? horizon : nil,
                          bytes: size(of: directory), seconds: Date().timeIntervalSince(started), pagesChecked: file.lastPage + 1)
        } catch {
            output.discardWritten()
            throw error
        }
    }

    static func size(of directory: String) -> UInt64 {
        var total: UInt64 = 0
        let enumerator = FileManager.default.enumerator(atPath: directory)
        while let name = enumerator?.nextObject() as? String {
            if let attributes = try? FileManager.default.attributesOfItem(atPath: directory + "/" + name),
               (attributes[.type] as? FileAttributeType) == .typeRegular {
                total += (attributes[.size] as? NSNumber)?.uint64Value ?? 0
            }
        }
        return total
    }
}
