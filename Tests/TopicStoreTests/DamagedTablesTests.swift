import Foundation
import SubscriptionLog
import Testing
import TopicStore

/// Damage LMDB itself meets: a corruption review found commands ending with a bare
/// "MDB_PAGE_NOTFOUND: Requested page not found (-30797)" (or MDB_CORRUPTED,
/// MDB_BAD_TXN) and exit 1, with no word of the store or of what to do; and a store
/// whose `meta` table, or whose record of a table in the table of tables, was
/// damaged called "not a topicstore database" (exit 3) by the CLI while `serve`
/// started on it, created fresh tables (a schema version, an empty `projects`) in
/// the file, and took writes.
@Suite struct DamagedTablesTests: RunsTopicstore {
    func makeStore(_ dir: TemporaryDirectory) throws -> String {
        let path = dir.sub("data")
        let store = try TopicStore(directory: path)
        var events: [Event] = []
        for i in 0..<2_000 {
            events.append(Event(project: "demo", body: .token(deviceID: "device-\(i)", token: "token-\(i)-" + String(repeating: "t", count: 40), platform: .ios)))
            events.append(Event(project: "demo", body: .register(deviceID: "device-\(i)", topics: [TopicSpec(code: "all"), TopicSpec(code: "t\(i % 9)")])))
        }
        for r in store.submitAndWait(events) { _ = try r.get() }
        store.close()
        return path
    }

    func expectDamageReported(_ run: TopicstoreRun, _ store: String, _ what: String) {
        #expect(run.status == 4, "\(what): exit \(run.status): \(run.stderr.prefix(400))")
        #expect(run.stderr.contains("damaged") && run.stderr.contains(store) && run.stderr.contains("topicstore audit"),
                "\(what): \(run.stderr.prefix(400))")
        #expect(!run.stderr.contains("MDB_") || run.stderr.contains("is damaged"), "\(what): a bare LMDB error: \(run.stderr.prefix(400))")
    }

    /// The root of `table` (a branch page), from its record in the table of tables.
    func root(_ image: DataFileImage, _ table: String) throws -> Int {
        image.word(try image.tableRecord(table).valueOffset + 40, UInt64.self)
    }

    @Test func lmdbMeetingADamagedPageIsCorruptionNamingTheStoreAndAudit() throws {
        let dir = TemporaryDirectory("tables")
        let store = try makeStore(dir)
        let image = try DataFileImage(store)
        // MDB_PAGE_NOTFOUND: a child of the devices root made a page past the file.
        let devicesRoot = try root(image, "devices")
        #expect(image.word(devicesRoot * DataFileImage.pageSize + 10, UInt16.self) & 1 == 1, "the devices root is a branch page")
        let notFound = try DataFileImage.copy(store, dir, "not-found")
        let node = devicesRoot * DataFileImage.pageSize + image.word(devicesRoot * DataFileImage.pageSize + 16 + 2 * 1, UInt16.self)
        try DataFileImage.write(notFound, at: node + 2, [0x02, 0x00])
        expectDamageReported(try topicstore(["audience", "--data", notFound, "--project", "demo", "--tokens", "all"]), notFound, "page not found")
        // MDB_CORRUPTED: the device_topics root zeroed.
        let corrupted = try DataFileImage.copy(store, dir, "corrupted")
        try DataFileImage.write(corrupted, at: try root(image, "device_topics") * DataFileImage.pageSize, [UInt8](repeating: 0, count: DataFileImage.pageSize))
        expectDamageReported(try topicstore(["device", "--data", corrupted, "--project", "demo", "device-2"]), corrupted, "wrong page type")
        // The postings table's root page number garbage (MDB_PAGE_NOTFOUND, then MDB_BAD_TXN).
        let badRoot = try DataFileImage.copy(store, dir, "bad-root")
        try DataFileImage.write(badRoot, at: try image.tableRecord("postings").valueOffset + 40, [0xdf, 0x1e, 0x91, 0x21, 0x10, 0x28, 0x82, 0x00])
        expectDamageReported(try topicstore(["audience", "--data", badRoot, "--project", "demo", "all"]), badRoot, "bad root")
    }

    /// A writer must find every table of a file that holds a store, or refuse it.
    func expectRefusedAndUntouched(_ damaged: String, _ what: String) throws {
        let before = try Data(contentsOf: URL(fileURLWithPath: damaged + "/data.mdb"))
        expectDamageReported(try topicstore(["audience", "--data", damaged, "--project", "demo", "all"]), damaged, "\(what): audience")
        expectDamageReported(try topicstore(["audit", "--data", damaged]), damaged, "\(what): audit")
        let serve = try runWithDeadline(["serve", "--data", damaged, "--listen", "127.0.0.1:0", "--quiet"], seconds: 20)
        #expect(serve.status == 4, "\(what): serve: \(String(describing: serve.status)): \(serve.stdout.prefix(200)) \(serve.stderr.prefix(400))")
        let load = try topicstore(["load", "--data", damaged, "-"], stdin: #"{"project":"demo","type":"token","device_id":"x","token":"tx","platform":"ios"}"# + "\n")
        #expect(load.status == 4, "\(what): load: \(load.status) \(load.stderr.prefix(300))")
        #expect(try Data(contentsOf: URL(fileURLWithPath: damaged + "/data.mdb")) == before, "\(what): the file was written to")
    }

    @Test func aStoreWithoutItsSchemaVersionIsDamagedAndNoWriterStampsANewOne() throws {
        let dir = TemporaryDirectory("tables")
        let store = try makeStore(dir)
        let damaged = try DataFileImage.copy(store, dir, "meta")
        let entry = try #require(try DataFileImage(damaged).entries("meta").first { $0.key == Array("schemaVersion".utf8) })
        // "schemaVersion" → "schemaVersiom": the meta table no longer holds it.
        try DataFileImage.write(damaged, at: entry.keyOffset + entry.key.count - 1, [Character("m").asciiValue!])
        try expectRefusedAndUntouched(damaged, "schema version")
    }

    @Test func aStoreMissingAProjectionTableIsDamagedAndNoWriterCreatesAFreshOne() throws {
        let dir = TemporaryDirectory("tables")
        let store = try makeStore(dir)
        let damaged = try DataFileImage.copy(store, dir, "projects")
        let entry = try DataFileImage(damaged).tableRecord("projects")
        // "projects" → "projectr" in the table of tables: the table is gone from LMDB's view.
        try DataFileImage.write(damaged, at: entry.keyOffset + entry.key.count - 1, [Character("r").asciiValue!])
        try expectRefusedAndUntouched(damaged, "projects table")
    }
}
