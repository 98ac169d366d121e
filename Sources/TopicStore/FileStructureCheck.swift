import LMDB
import SubscriptionLog

extension TopicStore {
    /// Walks the data.mdb of the store in `directory` (its active generation) page
    /// by page, outside LMDB: see `Environment.checkStructure`. Call it before the
    /// store is opened: opening reads the table of tables through LMDB, and LMDB
    /// trusts every page it reads (a damaged one can kill the process). Only the
    /// meta pages are read through LMDB, and a read transaction pins the snapshot
    /// walked, so a server may go on writing meanwhile.
    public static func checkFileStructure(directory: String, maxIssues: Int = 1000) throws -> FileStructure {
        try checkFileStructure(directory: directory, maxIssues: maxIssues, readingThroughMap: true)
    }

    /// `checkFileStructure`, its pages read with pread rather than through a map of
    /// the file when `readingThroughMap` is false (what a walk does when mapping fails).
    package static func checkFileStructure(directory: String, maxIssues: Int, readingThroughMap: Bool) throws -> FileStructure {
        try requireExisting(directory: directory)
        let path = generationDirectory(directory, try activeGeneration(in: directory))
        var options = Environment.Options()
        options.readOnly = true
        options.maxDatabases = 32
        let environment = try Generation.openEnvironment(path, options)
        return try environment.checkStructure(maxIssues: maxIssues, readingThroughMap: readingThroughMap)
    }
}

extension TopicStore {
    /// Whether the only damage `file` found is log keys out of order in leaf pages that
    /// are otherwise whole (and the log's counts, which the walk then cannot match): key
    /// bytes that LMDB compares but never follows. The log and the projections can still
    /// be read through LMDB, and the log verifier locates each such record by its key and
    /// its own sequence, and goes on checking the records after it.
    public static func onlyLogKeysAreOutOfOrder(_ file: FileStructure) -> Bool {
        file.issueCount == file.issues.count
            && file.issues.contains { $0.kind == .keyOrder }
            && file.issues.allSatisfy { $0.table == EventLog.databaseName && ($0.kind == .keyOrder || $0.kind == .counts) }
    }
}
