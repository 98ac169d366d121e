import Foundation
import LMDB

/// A consistent copy of a live store's file, for backups.
extension TopicStore {
    /// Why a backup copy could not be made as asked.
    public struct BackupCopyError: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// Copies the current generation's data.mdb into `directory` (new or empty) as a store
    /// of its own: `directory/<generation>/data.mdb` and a `CURRENT` naming it, or
    /// `directory/data.mdb` for a store without generations. The copy is LMDB's
    /// (`mdb_env_copy2`, compacting: free pages left out, pages renumbered): one read
    /// transaction, so it is the store as of one commit, taken beside writers in any
    /// process without stopping them. Projects, keys, credentials and queued
    /// notifications are in the same file and come along. Returns the generation copied.
    ///
    /// Copying the files of a live store with `cp` does not give this: an operator
    /// review found 5 copies in 6 damaged (free list and page errors), taken under load.
    public func copyCurrentGeneration(into directory: String) throws -> String {
        let g = current
        let activeBefore = try Self.activeGeneration(in: self.directory)
        let target = Self.generationDirectory(directory, g.name)
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        try g.environment.copy(to: target, compact: true)
        // A compaction that switched generations meanwhile: the copy is of a retired generation.
        let activeAfter = try Self.activeGeneration(in: self.directory)
        let retired = try g.retiredTo()
        guard activeBefore == g.name, activeAfter == g.name, retired == nil else {
            throw BackupCopyError(description: "a compaction switched \(self.directory) from generation \(g.name.isEmpty ? "(none)" : g.name) to "
                + "\(retired ?? activeAfter) while it was copied; run the backup again")
        }
        if !g.name.isEmpty { try Self.setActiveGeneration(g.name, in: directory) }
        return g.name
    }
}
