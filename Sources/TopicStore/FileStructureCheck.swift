import Foundation
import LMDB
import SubscriptionLog

extension TopicStore {
    /// Walks the data.mdb of the store in `directory` (its active generation) page
    /// by page, with pread: see `Environment.checkStructure`. Call it before the
    /// store is opened: opening reads the table of tables through LMDB, and LMDB
    /// trusts every page it reads (a damaged one can kill the process). Only the
    /// meta pages are read through LMDB, and a read transaction pins the snapshot
    /// walked, so a server may go on writing meanwhile.
    public static func checkFileStructure(directory: String, maxIssues: Int = 1000) throws -> FileStructure {
        try requireExisting(directory: directory)
        let path = generationDirectory(directory, try activeGeneration(in: directory))
        var options = Environment.Options()
        options.readOnly = true
        options.maxDatabases = 32
        let environment: Environment
        do {
            environment = try Environment(path: path, options: options)
        } catch LMDBError.invalid {
            throw StoreError.notADatabase(path: path, reason: "data.mdb is not an LMDB file")
        } catch LMDBError.versionMismatch {
            throw StoreError.notADatabase(path: path, reason: "data.mdb was written by an incompatible LMDB")
        } catch LMDBError.alreadyOpen {
            throw StoreError.alreadyOpen(path: path)
        } catch is EmptyDataFile {
            throw StoreError.notADatabase(path: path, reason: "data.mdb is empty (0 bytes): a store cut to nothing, or never written")
        }
        return try environment.checkStructure(maxIssues: maxIssues)
    }
}

extension TopicStore {
    /// Whether the only damage `file` found is log keys out of order within leaf
    /// pages (and the log's record counts, which the walk then cannot match): key
    /// bytes that LMDB compares but never follows. The pages are otherwise whole —
    /// checked again here, node by node, since the walk stops at a page's first
    /// bad key — so the log and the projections can still be read through LMDB,
    /// and the log verifier locates each such record by its key and its own
    /// sequence, and goes on checking the records after it.
    public static func onlyLogKeysAreOutOfOrder(_ file: FileStructure, directory: String) throws -> Bool {
        guard file.issueCount == file.issues.count, file.pageSize > 0 else { return false }
        var keyPages: Set<Int> = []
        for issue in file.issues {
            guard issue.table == EventLog.databaseName else { return false }
            let m = issue.message
            if m.hasSuffix("keys out of order") || m.contains("is below the branch key that leads here")
                || m.contains("is not below the next branch key") {
                guard let page = issue.page else { return false }
                keyPages.insert(page)
            } else if !m.hasPrefix("its record counts") {
                return false
            }
        }
        guard !keyPages.isEmpty else { return false }
        let path = generationDirectory(directory, try activeGeneration(in: directory)) + "/data.mdb"
        guard let handle = FileHandle(forReadingAtPath: path) else { return false }
        defer { try? handle.close() }
        let size = file.pageSize
        for number in keyPages {
            try handle.seek(toOffset: UInt64(number * size))
            guard let data = try handle.read(upToCount: size), data.count == size else { return false }
            let page = [UInt8](data)
            func word(_ at: Int) -> Int { Int(page[at]) | Int(page[at + 1]) << 8 }
            // A leaf page (flags at 10), its node pointers (up to `lower`, at 12) after the header.
            let flags = word(10), lower = word(12), upper = word(14)
            guard flags & 0x03 == 0x02, lower >= 16, lower <= upper, upper <= size else { return false }
            for i in 0..<(lower - 16) / 2 {
                // Each node within the page: 8-byte header (value size, flags, key size), key, value.
                let node = word(16 + 2 * i)
                guard node >= upper, node + 8 <= size else { return false }
                let valueSize = word(node) | word(node + 2) << 16, nodeFlags = word(node + 4), keySize = word(node + 6)
                let valueEnd = node + 8 + keySize + (nodeFlags & 0x01 != 0 ? 8 : valueSize)
                guard nodeFlags & ~0x01 == 0, valueEnd <= size else { return false }
            }
        }
        return true
    }
}
