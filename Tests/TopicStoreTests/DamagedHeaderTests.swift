import Foundation
import SubscriptionLog
import Testing
import TopicStore

/// Numbers LMDB keeps in its headers are read as they are: a flipped bit in the
/// meta page's last page number, or in a table's page counts, made arithmetic on
/// them overflow and every command die (SIGILL) — `audit` and `serve` included.
/// A corruption review found both; they are damage, reported with exit 4.
@Suite struct DamagedHeaderTests: RunsTopicstore {
    func makeStore(_ dir: TemporaryDirectory) throws -> String {
        let path = dir.sub("data")
        let store = try TopicStore(directory: path)
        var events: [Event] = []
        for i in 0..<400 {
            events.append(Event(project: "demo", body: .token(deviceID: "d\(i)", token: "tok-\(i)", platform: i % 2 == 0 ? .ios : .android)))
            events.append(Event(project: "demo", body: .register(deviceID: "d\(i)", topics: [TopicSpec(code: "all"), TopicSpec(code: "t\(i % 7)")])))
        }
        for r in store.submitAndWait(events) { _ = try r.get() }
        store.close()
        return path
    }

    /// One bit of the newest meta page's last page number: past what any file holds.
    @Test(arguments: [(6, 6), (5, 7), (7, 7)])
    func aMetaPageClaimingMorePagesThanAFileHoldsIsDamageNotACrash(byte: Int, bit: Int) throws {
        let dir = TemporaryDirectory("header")
        let store = try makeStore(dir)
        let damaged = try DataFileImage.copy(store, dir, "meta")
        let image = try DataFileImage(damaged)
        let at = image.lastPageOffset + byte
        try DataFileImage.write(damaged, at: at, [image.bytes[at] ^ UInt8(1 << bit)])
        for command in [["stats"], ["audit"], ["audience", "--project", "demo", "all"], ["export"]] {
            let run = try topicstore(command + ["--data", damaged])
            #expect(run.status == 4, "\(command[0]): exit \(run.status): \(run.stderr.prefix(400))")
            #expect(run.stderr.contains(damaged + "/data.mdb") && run.stderr.contains("meta page"), "\(command[0]): \(run.stderr.prefix(400))")
        }
        let serve = try runWithDeadline(["serve", "--data", damaged, "--listen", "127.0.0.1:0", "--quiet"], seconds: 20)
        #expect(serve.status == 4, "serve: \(String(describing: serve.status)): \(serve.stderr.prefix(400))")
    }

    /// One flipped bit in a meta page's magic number: LMDB refuses the whole file as not
    /// its own (MDB_INVALID), and every command said "not a topicstore database" (exit 3),
    /// `audit` included. An auditor review found it; it is damage, exit 4, the page named.
    @Test(arguments: [0, 1])
    func aMetaPageLMDBCannotReadIsDamageNotAnotherKindOfFile(page: Int) throws {
        let dir = TemporaryDirectory("header")
        let store = try makeStore(dir)
        let damaged = try DataFileImage.copy(store, dir, "magic")
        let image = try DataFileImage(damaged)
        let at = page * DataFileImage.pageSize + 16
        try DataFileImage.write(damaged, at: at, [image.bytes[at] ^ 0x20])
        let before = try Data(contentsOf: URL(fileURLWithPath: damaged + "/data.mdb"))
        for command in [["stats"], ["audit"], ["audit", "--file-only"], ["load", "-"]] {
            let run = try topicstore(command + ["--data", damaged], stdin: "")
            #expect(run.status == 4, "\(command): exit \(run.status): \(run.stderr.prefix(400))")
            #expect(run.stderr.contains("meta page \(page)") && run.stderr.contains("damaged"), "\(command): \(run.stderr.prefix(400))")
        }
        let serve = try runWithDeadline(["serve", "--data", damaged, "--listen", "127.0.0.1:0", "--quiet"], seconds: 20)
        #expect(serve.status == 4, "serve: \(String(describing: serve.status)): \(serve.stderr.prefix(400))")
        #expect(try Data(contentsOf: URL(fileURLWithPath: damaged + "/data.mdb")) == before, "the file was written to")
    }

    /// The newest meta page's root of the table of tables pointing at another page (here a
    /// page of the log): LMDB opens the file and finds none of the store's tables, and the
    /// commands said "not a topicstore database" (exit 3). The page walk tells it is damage.
    @Test func aMetaPageWhoseRootMissesTheTablesIsDamage() throws {
        let dir = TemporaryDirectory("header")
        let store = try makeStore(dir)
        let damaged = try DataFileImage.copy(store, dir, "root")
        let image = try DataFileImage(damaged)
        let rootAt = image.newestMeta * DataFileImage.pageSize + 16 + 72 + 40
        let logPage = try #require(try image.entries("log").first?.page)
        #expect(logPage != image.word(rootAt, UInt64.self))
        try DataFileImage.write(damaged, at: rootAt, withUnsafeBytes(of: UInt64(logPage).littleEndian) { Array($0) })
        let before = try Data(contentsOf: URL(fileURLWithPath: damaged + "/data.mdb"))
        for command in [["stats"], ["load", "-"], ["project", "add", "other"], ["audit"]] {
            let run = try topicstore(command + ["--data", damaged], stdin: "")
            #expect(run.status == 4, "\(command): exit \(run.status): \(run.stderr.prefix(400))")
            #expect((run.stderr + run.stdout).contains(command[0] == "audit" ? "page" : "damaged"), "\(command): \(run.stdout.prefix(400)) \(run.stderr.prefix(400))")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: damaged + "/data.mdb")) == before, "the file was written to")
    }

    /// The leaf page count in the table of tables' record of `postings` (its top byte).
    @Test func aTableRecordWithAbsurdCountsIsReportedByStats() throws {
        let dir = TemporaryDirectory("header")
        let store = try makeStore(dir)
        let damaged = try DataFileImage.copy(store, dir, "record")
        let record = try DataFileImage(damaged).tableRecord("postings")
        try DataFileImage.write(damaged, at: record.valueOffset + 16 + 7, [0x80])
        let stats = try topicstore(["stats", "--data", damaged])
        #expect(stats.status == 4, "exit \(stats.status): \(stats.stderr.prefix(400))")
        #expect(stats.stdout.contains("table postings: damaged"), "\(stats.stdout)")
        #expect(stats.stdout.contains("table devices: "), "the other tables are still listed: \(stats.stdout)")
        #expect(stats.stderr.contains("postings") && stats.stderr.contains("topicstore audit"), "\(stats.stderr)")
        let json = try topicstore(["stats", "--data", damaged, "--json"])
        #expect(json.status == 4)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let postings = try #require((object["tables"] as? [String: Any])?["postings"] as? [String: Any])
        #expect((postings["damaged"] as? String)?.contains("leaf") == true, "\(postings)")
    }
}
