import Foundation
import LMDB
import Testing
import TopicStore

/// A data.mdb cut short (a backup copy that stopped early, a full disk) or cut to
/// nothing. LMDB reads its meta pages with read() at open and maps the rest, so a
/// review found every command killed by SIGBUS at the first page past the end of
/// the file (exit 135), and an empty file refused with "Bad file descriptor" (exit 1).
@Suite struct TruncatedStoreTests: RunsTopicstore {
    static let commands = """
    {"project":"demo","type":"token","device_id":"D1","token":"tokA","platform":"ios"}
    {"project":"demo","type":"register","device_id":"D1","topics":["news"]}
    {"project":"demo","type":"token","device_id":"D2","token":"tokB","platform":"android"}
    {"project":"demo","type":"register","device_id":"D2","topics":["news","sport"]}
    {"project":"demo","type":"register","device_id":"D3","topics":["news"]}
    """

    /// The bytes the store's newest meta page says its pages take.
    func usedBytes(_ directory: String) throws -> Int {
        var options = Environment.Options()
        options.readOnly = true
        return try Environment(path: directory, options: options).info().usedBytes
    }

    /// A copy of `store`'s data.mdb, alone, in `directory`, cut to `size` bytes.
    func cutCopy(of store: String, to directory: String, size: Int) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: store + "/data.mdb", toPath: directory + "/data.mdb")
        #expect(truncate(directory + "/data.mdb", off_t(size)) == 0)
    }

    /// What the command left of data.mdb: the file is never repaired, extended or initialized.
    func dataFile(_ directory: String) -> Data? { FileManager.default.contents(atPath: directory + "/data.mdb") }

    /// An empty data.mdb is not a store (exit 3), and no writer makes it one.
    @Test func anEmptyFileIsNotAStoreAndStaysEmpty() throws {
        let dir = TemporaryDirectory("empty")
        let empty = dir.sub("empty")
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: empty + "/data.mdb", contents: nil))
        for command in [["stats"], ["audit"], ["audience", "--project", "demo", "news"], ["load", "-"],
                        ["project", "add", "shop"], ["compact", "--retain", "30d"]] {
            let r = try topicstore(command + ["--data", empty], stdin: #"{"project":"demo","type":"register","device_id":"D9","topics":["news"]}"#)
            #expect(r.status == 3, "\(command): exit \(r.status) \(r.stderr.prefix(300))")
            #expect(r.stderr.contains("\(empty) is not a topicstore database: data.mdb is empty"), "\(command): \(r.stderr.prefix(300))")
            #expect(dataFile(empty)?.count == 0, "\(command) wrote into the empty file")
        }
        let serve = try runWithDeadline(["serve", "--data", empty, "--listen", "127.0.0.1:0", "--quiet"])
        #expect(serve.status == 3, "serve: \(String(describing: serve.status)) \(serve.stderr.prefix(300))")
        #expect(dataFile(empty)?.count == 0, "serve wrote into the empty file")
    }

    // MARK: the store

    /// Through the store, read-only or for writing: an empty file is `StoreError.notADatabase`
    /// (exit 3), and stays empty.
    @Test func aStoreRefusesAnEmptyFile() throws {
        let dir = TemporaryDirectory("store-empty")
        for readOnly in [true, false] {
            var options = TopicStore.Options()
            options.readOnly = readOnly
            let empty = dir.sub("empty-\(readOnly)")
            try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
            #expect(FileManager.default.createFile(atPath: empty + "/data.mdb", contents: nil))
            do {
                _ = try TopicStore(directory: empty, options: options)
                Issue.record("opened an empty data.mdb (readOnly: \(readOnly))")
            } catch StoreError.notADatabase(let path, let reason) {
                #expect(path == empty && reason.hasPrefix("data.mdb is empty"), "\(reason)")
            }
            #expect(dataFile(empty)?.count == 0)
        }
    }
}
