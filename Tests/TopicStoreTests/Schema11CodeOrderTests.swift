import Compaction
import Foundation
import LMDB
@testable import Projections
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// Since schema 11, `topic_codes` keys hold a code's length before the code
/// (`ProjectionTables.TopicCodeOrder.byLength`): codes counted up in order are
/// appended to their length's range, where the form before put them among
/// the shorter codes, in the middle of the tree, and left its pages half full.
/// Listings in code order merge the lengths; an older store reads as before
/// and is rewritten when a writer opens it.
@Suite struct Schema11CodeOrderTests {
    static var readOnly: TopicStore.Options {
        var o = TopicStore.Options(); o.readOnly = true; return o
    }

    /// Codes of many lengths, many of them prefixes of others, per-user codes among them.
    static func codes(_ rng: inout SeededRandom) -> [String] {
        var codes: Set<String> = ["a", "ab", "abc", "a.b", "zz", "t.5", "t.50", "user", "user.", "user.1", "user.10"]
        let alphabet = Array("ab.1_9")
        while codes.count < 700 {
            let n = Int.random(in: 1...12, using: &rng)
            codes.insert(String((0..<n).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &rng)] }))
        }
        for n in (0..<1_500).shuffled(using: &rng).prefix(500) { codes.insert("user.\(n)") }
        codes.insert(String(repeating: "x", count: 128))
        return codes.sorted()
    }

    /// Registers every code (100 to a command) to devices of `project`.
    static func register(_ codes: [String], project: String, in store: TopicStore) throws {
        var events: [Event] = []
        for (i, start) in stride(from: 0, to: codes.count, by: 100).enumerated() {
            let topics = codes[start..<min(start + 100, codes.count)].map { TopicSpec(code: $0) }
            events.append(Event(project: project, body: .register(deviceID: "d\(i)", topics: Array(topics))))
        }
        for result in store.submitAndWait(events) { _ = try result.get() }
    }

    static func pid(_ store: TopicStore, _ project: String) throws -> UInt32 {
        try #require(try store.read { txn in try store.reader.project(named: project, txn)?.id })
    }

    /// Every key of `topic_codes`, with the form it says it is in.
    static func keyForms(_ store: TopicStore) throws -> [ProjectionTables.TopicCodeOrder: Int] {
        try store.read { txn in
            var forms: [ProjectionTables.TopicCodeOrder: Int] = [:]
            try txn.withCursor(store.tables.topicCodes) { cursor in
                var entry = try cursor.first()
                while let (key, _) = entry {
                    if let form = Keys.codeBytes(ofKey: key)?.order { forms[form, default: 0] += 1 }
                    entry = try cursor.next()
                }
            }
            return forms
        }
    }

    /// Pages of either form give the codes a sorted list gives: for random
    /// prefixes, `after` codes (present or not, shorter or longer than the
    /// codes around them) and limits; walking every page gives every code once.
    @Test(arguments: [ProjectionTables.TopicCodeOrder.byLength, .bytewise])
    func pagesAreInCodeOrderInEitherForm(_ form: ProjectionTables.TopicCodeOrder) throws {
        let dir = TemporaryDirectory("code-order")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        var rng = SeededRandom(seed: 11)
        let demo = Self.codes(&rng)
        let other = Array(demo.shuffled(using: &rng).prefix(300)).sorted()
        try Self.register(demo, project: "demo", in: store)
        try Self.register(other, project: "other", in: store)
        if form == .bytewise {
            try store.environment.write { txn in try store.tables.reorderTopicCodes(.bytewise, txn) }
        }
        #expect(try Self.keyForms(store) == [form: demo.count + other.count])
        for (project, codes) in [("demo", demo), ("other", other)] {
            let pid = try Self.pid(store, project)
            try store.read { txn in
                for code in codes { #expect(try store.reader.topicID(pid, code: code, txn) != nil, "\(code)") }
                for code in ["nope", "user.1500", "abcabcabcabc.", String(repeating: "x", count: 129)] {
                    #expect(try store.reader.topicID(pid, code: code, txn) == nil)
                }
                for _ in 0..<300 {
                    let some = codes.randomElement(using: &rng)!
                    let prefix = ["", "a", "ab", "user.", "user.1", "t", "zzz", String(some.prefix(Int.random(in: 0...some.count, using: &rng)))]
                        .randomElement(using: &rng)!
                    let after: String? = [nil, some, some + "1", String(some.dropLast()), "user.12", "b"].randomElement(using: &rng)!
                    let limit = Int.random(in: 1...40, using: &rng)
                    let matching = codes.filter { code in code.hasPrefix(prefix) && after.map { a in a.utf8.lexicographicallyPrecedes(code.utf8) } ?? true }
                    let page = try store.reader.topicPage(pid, prefix: prefix, after: after, limit: limit, txn)
                    #expect(page.topics.map(\.record.code) == Array(matching.prefix(limit)), "prefix \(prefix) after \(after ?? "-") limit \(limit)")
                    #expect(page.next == (matching.count > limit ? matching[limit - 1] : nil))
                }
                var walked: [String] = [], after: String? = nil
                repeat {
                    let page = try store.reader.topicPage(pid, after: after, limit: 7, txn)
                    walked += page.topics.map(\.record.code)
                    after = page.next
                } while after != nil
                #expect(walked == codes)
            }
        }
    }

    /// Per-user codes given out in counting order, as an app numbers its users:
    /// in the form before schema 11 they went in among the shorter codes, and
    /// LMDB's splits left the pages half full; now they fill them.
    @Test func codesCountedUpFillTheirPages() throws {
        func fill(_ form: ProjectionTables.TopicCodeOrder) throws -> Double {
            let dir = TemporaryDirectory("code-fill")
            let store = try TopicStore(directory: dir.path)
            defer { store.close() }
            if form == .bytewise {
                try store.environment.write { txn in try store.tables.reorderTopicCodes(.bytewise, txn) }
            }
            var events: [Event] = []
            for i in 0..<20_000 {
                events.append(Event(project: "demo", body: .register(deviceID: "d\(i)", topics: [TopicSpec(code: "user.\(i)", single: true)])))
            }
            for start in stride(from: 0, to: events.count, by: 500) {
                for result in store.submitAndWait(Array(events[start..<start + 500])) { _ = try result.get() }
            }
            #expect(try Self.keyForms(store) == [form: 20_000])
            return try store.read { txn in
                var needed = 0
                try txn.withCursor(store.tables.topicCodes) { cursor in
                    var entry = try cursor.first()
                    while let (key, value) = entry {
                        needed += 8 + key.count + value.count + 2  // node header, key, value, slot
                        entry = try cursor.next()
                    }
                }
                let stats = try txn.statistics(store.tables.topicCodes)
                return Double(needed) / Double(stats.leafPages * (stats.pageSize - 16))
            }
        }
        let before = try fill(.bytewise), now = try fill(.byLength)
        #expect(before < 0.65, "pages \(Int(before * 100))% full in the form before schema 11")
        #expect(now > 0.85, "pages \(Int(now * 100))% full")
    }

    /// A compacted store as schema 10 left it (its snapshot too): read-only, it
    /// answers as before and audits clean; a writer rewrites its codes, and it
    /// still answers the same and audits clean (the snapshot keeps the older
    /// form: the audit's rebuild takes the store's); new codes are found.
    @Test func aSchema10StoreIsRewrittenWhenOpenedForWriting() throws {
        let dir = TemporaryDirectory("code-upgrade")
        let (store, cut) = try storeWithCut(dir, before: 300, after: 60, seed: 23)
        var rng = SeededRandom(seed: 5)
        try Self.register(Self.codes(&rng), project: "demo", in: store)
        store.close()
        let report = try Compactor.run(directory: dir.sub("data"), options: compactionOptions(keepingFrom: cut))
        let snapshot = try #require(try Snapshot.find(inStore: dir.sub("data"), horizon: report.horizon))

        func answers(_ store: TopicStore) throws -> [String] {
            try store.read { txn in
                var lines: [String] = []
                for project in try store.reader.projects(txn).map(\.name) {
                    let pid = try Self.pid(store, project)
                    var after: String? = nil
                    repeat {
                        let page = try store.reader.topicPage(pid, after: after, limit: 50, txn)
                        for t in page.topics {
                            lines.append("\(project) \(t.record.code) \(t.record.subscribers) \(try store.reader.topicID(pid, code: t.record.code, txn) ?? 0)")
                        }
                        after = page.next
                    } while after != nil
                    lines.append("\(project) user.: " + (try store.reader.topicPage(pid, prefix: "user.", limit: 20, txn)).topics.map(\.record.code).joined(separator: " "))
                }
                return lines
            }
        }
        let expected: [String]
        do {
            let live = try TopicStore(directory: dir.sub("data"))
            expected = try answers(live)
            #expect(expected.count > 700)
            try rewriteAsOlderSchema(live, live.tables.topics, schema: 10) { Array($0) }
            live.close()
            let old = try TopicStore(directory: snapshot.directory)
            try rewriteAsOlderSchema(old, old.tables.topics, schema: 10) { Array($0) }
            #expect(try Self.keyForms(old)[.byLength] == nil)
            old.close()
        }
        do {
            let live = try TopicStore(directory: dir.sub("data"), options: Self.readOnly)
            defer { live.close() }
            #expect(try live.read { txn in try live.tables.storedSchemaVersion(txn) } == 10)
            #expect(try Self.keyForms(live)[.byLength] == nil)
            #expect(try answers(live) == expected)
            // The rebuild keys its codes as the store does, and the version no writer has
            // stamped yet is said, not counted as a difference.
            let audit = try Audit.run(live)
            #expect(audit.isClean, "\(audit.logIssues.prefix(3)) \(audit.differences.prefix(3))")
            #expect(audit.olderSchema == 10)
            #expect(audit.entriesCompared > 700)
            let cli = try compactCLI(["audit", "--data", dir.sub("data")])
            #expect(cli.status == 0 && cli.output.contains("\n  the store is at schema 10, the rebuild at \(ProjectionTables.schemaVersion): a writer's next open brings it to \(ProjectionTables.schemaVersion)\n"), "\(cli.output)")
        }
        let live = try TopicStore(directory: dir.sub("data"))
        defer { live.close() }
        #expect(try live.read { txn in try live.tables.storedSchemaVersion(txn) } == ProjectionTables.schemaVersion)
        #expect(try live.read { txn in try live.tables.topicCodeOrder(txn) } == .byLength)
        #expect(try Self.keyForms(live)[.bytewise] == nil)
        #expect(try answers(live) == expected)
        try live.submitAndWait(Event(project: "demo", body: .register(deviceID: "late", topics: [TopicSpec(code: "user.100000000", single: true)])))
        #expect(try live.read { txn in try live.reader.topicPage(try Self.pid(live, "demo"), prefix: "user.10000", limit: 5, txn) }
            .topics.map(\.record.code) == ["user.100000000"])
        let audit = try Audit.run(live)
        #expect(audit.isClean, "\(audit.logIssues.prefix(3)) \(audit.differences.prefix(3))")
        #expect(audit.olderSchema == nil)
        #expect(audit.snapshot == snapshot.head)
        // A changed entry is still found, and named by its code.
        try live.environment.write { txn in
            try txn.put(live.tables.topicCodes, try #require(Keys.code(try Self.pid(live, "demo"), "forged", .byLength)), [0, 0, 0, 9])
        }
        let dirty = try Audit.run(live)
        #expect(dirty.differenceCount == 1 && dirty.differences.first?.subject == "topic forged", "\(dirty.differences)")
    }
}
