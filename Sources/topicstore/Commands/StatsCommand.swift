import AccessControl
import Foundation
import LMDB
import SubscriptionLog
import TopicStore

/// `topicstore stats`: the log, the projections and the file at a glance.
enum StatsCommand: Command {
    static let spec = CommandSpec(
        name: "stats",
        summary: "show the log range, projects, table sizes and file size",
        usage: "stats [--data DIR] [--json]",
        options: [])

    static func run(_ arguments: Arguments) throws -> ExitCode {
        var options = TopicStore.Options()
        options.readOnly = true
        let store = try TopicStore(directory: arguments.dataDirectory, options: options)
        var stats = try store.statistics()
        // A project added (`project add`) that no command has reached yet has no projections: list it with zeros.
        let withData = Set(stats.projects.map(\.name))
        for p in try AccessControl(store: store).projects() where !withData.contains(p.name) {
            stats.projects.append(.init(name: p.name, devices: 0, topics: 0, liveTokens: 0))
        }
        stats.projects.sort { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
        let fileBytes = (try? FileManager.default.attributesOfItem(atPath: store.environmentDirectory + "/data.mdb")[.size] as? Int) ?? 0
        if arguments.json {
            Console.printJSON([
                "schemaVersion": stats.schemaVersion, "topicLayout": "\(stats.topicLayout)",
                "firstSeq": stats.firstSequence as Any? ?? NSNullValue.null,
                "lastSeq": stats.lastSequence, "appliedSeq": stats.appliedSequence,
                "compactedThroughSeq": stats.compactedThrough as Any? ?? NSNullValue.null,
                "lastTimestamp": stats.lastTimestamp as Any? ?? NSNullValue.null,
                "fileBytes": fileBytes, "usedBytes": stats.usedBytes, "mapBytes": stats.mapSize,
                "projects": stats.projects.map { ["name": $0.name, "devices": $0.devices, "topics": $0.topics,
                                                  "liveTokens": $0.liveTokens] },
                "tables": Dictionary(uniqueKeysWithValues: stats.tables.map { t -> (String, [String: Any]) in
                    (t.name, t.damage.map { ["damaged": $0] } ?? ["entries": t.entries, "bytes": t.bytes])
                }),
            ])
        } else {
            print("schema \(stats.schemaVersion), \(stats.topicLayout) topic layout")
            let compacted = stats.compactedThrough.map { " (compacted through seq \($0))" } ?? ""
            if let first = stats.firstSequence {
                print("log: seq \(first)…\(stats.lastSequence)\(compacted), projections at seq \(stats.appliedSequence)")
            } else {
                print("log: empty\(compacted), projections at seq \(stats.appliedSequence)")
            }
            print("file: \(fileBytes) bytes (\(stats.usedBytes) in use, map \(stats.mapSize))")
            for p in stats.projects {
                print("project \(p.name): \(p.devices) devices, \(p.liveTokens) live tokens, \(p.topics) topics")
            }
            for t in stats.tables {
                if let damage = t.damage {
                    print("  table \(t.name): damaged: \(damage)")
                } else if t.name == EventLog.databaseName, let first = stats.firstSequence,
                          case let records = stats.lastSequence - first + 1, records != UInt64(t.entries) {
                    // A compaction keeps the log's records in blocks of many.
                    print("  table \(t.name): \(t.entries) entries holding \(records) records, \(t.bytes) bytes")
                } else {
                    print("  table \(t.name): \(t.entries) entries, \(t.bytes) bytes")
                }
            }
        }
        // A damaged record of the table of tables: the counts listed cannot be trusted, nor the file.
        let damaged = stats.tables.filter { $0.damage != nil }
        if !damaged.isEmpty {
            Console.printError("\(store.environmentDirectory)/data.mdb is damaged: the record of table(s) "
                + damaged.map(\.name).joined(separator: ", ") + " in its table of tables holds counts no store could have; "
                + "topicstore audit --data \(arguments.dataDirectory) locates the damage")
            return .verificationFailed
        }
        return .success
    }
}

/// JSONSerialization's null.
enum NSNullValue { static let null = NSNull() }
