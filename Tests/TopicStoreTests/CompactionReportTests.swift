import Compaction
import Foundation
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// What `compact` says: `--no-file` reports what it does (it trims no event),
/// a run without `--archive` says its removed events are kept nowhere, the
/// durations are documented as the parser takes them, and times are ISO 8601.
@Suite struct CompactionReportTests {
    /// A compacted store (a snapshot at its horizon) with more events after it.
    func compactedStore(_ dir: TemporaryDirectory) throws -> (horizon: UInt64, cut: Int64) {
        let (store, cut) = try storeWithCut(dir, before: 300, after: 60, seed: 31)
        store.close()
        var options = compactionOptions(keepingFrom: cut)
        options.garbage.devices = false; options.garbage.topics = false; options.garbage.tokens = false
        let report = try Compactor.run(directory: dir.sub("data"), options: options)
        #expect(report.horizon > 0 && report.generationAfter != "")
        return (report.horizon, cut)
    }

    /// A time before the horizon is named in ISO 8601 (`…T…Z`), as everywhere
    /// else, not in Foundation's `2026-11-30 21:02:00 +0000`.
    @Test func beforeHorizonErrorsPrintISOTimes() throws {
        let dir = TemporaryDirectory("horizon-iso")
        let (horizon, _) = try compactedStore(dir)
        let snapshot = try #require(try Snapshot.find(inStore: dir.sub("data"), horizon: horizon))
        var options = TopicStore.Options(); options.readOnly = true
        let live = try TopicStore(directory: dir.sub("data"), options: options)
        defer { live.close() }
        let early = snapshot.timestamp - 60_000
        do {
            try Replay.rebuild(from: live, to: .time(early), into: dir.sub("out"))
            Issue.record("a time before the horizon was replayed")
        } catch {
            let text = "\(error)"
            #expect(text.contains(TimeText.iso(early)), "\(text)")
            #expect(text.contains(TimeText.iso(snapshot.timestamp)), "\(text)")
            #expect(!text.contains("+0000"), "\(text)")
        }
        do {
            try Replay.rebuild(from: live, to: .sequence(horizon - 1), into: dir.sub("out2"))
            Issue.record("a sequence before the horizon was replayed")
        } catch {
            #expect("\(error)".contains(TimeText.iso(snapshot.timestamp)) && !"\(error)".contains("+0000"), "\(error)")
        }
    }
}

/// The package's root directory (this file is in Tests/TopicStoreTests).
func packageRoot() -> String {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
}
