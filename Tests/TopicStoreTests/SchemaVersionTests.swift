import Foundation
import LMDB
@testable import Projections
import SubscriptionLog
import Testing
import TopicStore

/// A store of a schema newer than this program's (what an older program meets
/// when it opens a store stamped 7, whose names it could not read) is refused,
/// for reading and for writing, with the version named, and is left untouched.
@Suite struct SchemaVersionTests: RunsTopicstore {
    @Test func aStoreOfANewerSchemaIsRefusedAndUntouched() throws {
        let dir = TemporaryDirectory("schema-newer")
        let path = try loadedStore(dir, #"{"project":"demo","type":"token","device_id":"d1","token":"cXb0RqIXTLOyH2kRmr7pa1:APA91bFq3","platform":"android"}"# + "\n")
        let newer = ProjectionTables.schemaVersion + 1
        do {
            let store = try TopicStore(directory: path)
            try store.environment.write { txn in
                var w = ByteWriter(); w.u32(newer)
                try txn.put(store.tables.meta, Array("schemaVersion".utf8), w.bytes)
            }
            store.close()
        }
        let before = try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb"))
        var readOnly = TopicStore.Options()
        readOnly.readOnly = true
        for options in [TopicStore.Options(), readOnly] {
            #expect {
                _ = try TopicStore(directory: path, options: options)
            } throws: { error in
                guard case StoreError.unsupportedSchema(_, let version) = error else { return false }
                return version == newer
            }
        }
        for arguments in [["audience", "--data", path, "--project", "demo", "all"], ["load", "--data", path, "-"]] {
            let run = try topicstore(arguments, stdin: "")
            #expect(run.status == 3 && run.stderr.contains("schema version \(newer), which this topicstore does not know"),
                    "\(arguments[0]): \(run.status) \(run.stderr.prefix(300))")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb")) == before, "the file was written to")
    }
}
