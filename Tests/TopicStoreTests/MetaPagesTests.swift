import Foundation
import LMDB
import Testing

/// The meta pages mapped on their own (`MetaPages`): what a count from the
/// serving caches reads LMDB's newest transaction id from, with no lock. It
/// must be the id LMDB itself reports after every commit, through map
/// resizes, with the pages written through the file or through the map; and
/// once detached it must answer nothing and hold the file no longer.
@Suite struct MetaPagesTests {
    @Test(arguments: [false, true])
    func theNewestTransactionAfterEveryCommit(writeMap: Bool) throws {
        let dir = TemporaryDirectory()
        var options = Environment.Options()
        options.mapSize = 1 << 20
        options.writeMap = writeMap
        let env = try Environment(path: dir.path, options: options)
        let db = try env.openDatabases(["t"], create: true)[0]
        let pages = try #require(MetaPages(env))
        #expect(pages.lastTransactionID == env.lastTransactionID)
        for i in 0..<60 {
            try env.write { txn in
                // Enough bytes that the map grows (below) and pages alternate between the metas.
                try txn.put(db, Array("key\(i)".utf8), [UInt8](repeating: UInt8(i), count: 8 << 10))
            }
            #expect(pages.lastTransactionID == env.lastTransactionID, "commit \(i)")
            if i == 30 { try env.setMapSize(8 << 20) }  // the environment's map moves; this mapping does not
        }
        let last = try #require(pages.lastTransactionID)
        #expect(last >= 61, "one transaction for the table, one per commit")
    }

    @Test func aDetachedMappingAnswersNothingAndLetsGoOfTheFile() throws {
        let dir = TemporaryDirectory()
        let env = try Environment(path: dir.path)
        let db = try env.openDatabases(["t"], create: true)[0]
        try env.write { txn in try txn.put(db, [1], [2]) }
        let pages = try #require(MetaPages(env))
        #expect(pages.lastTransactionID != nil)
        pages.detach()
        #expect(pages.lastTransactionID == nil)
        // Commits and the file's removal go on without it.
        try env.write { txn in try txn.put(db, [3], [4]) }
        #expect(pages.lastTransactionID == nil)
        try FileManager.default.removeItem(atPath: dir.path + "/data.mdb")
        #expect(pages.lastTransactionID == nil)
    }
}
