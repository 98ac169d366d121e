import Compaction
import Foundation
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// Compaction verifies the archive it wrote against the log before it removes
/// anything (`Archive.verify`), reading the archive's lines on a second thread
/// (`ParsedArchiveLines`): every way an archive can differ from the log is
/// found, and of two the earlier line is the one reported.
@Suite struct ArchiveVerifyTests {
    /// A store of 300 records and its export's lines.
    static func source(_ dir: ReplayTempDir) throws -> (TopicStore, [String]) {
        let store = try TopicStore(directory: dir.sub("live"))
        try HashChainTests.fill(store, count: 300, seed: 71)
        var lines: [String] = []
        try Export.lines(from: store) { lines.append($0) }
        return (store, lines)
    }

    /// The verification's error for an archive holding `lines` (nil: it verifies), with
    /// chunks of 7 lines so that faults fall inside and at the ends of them.
    static func verify(_ lines: [String], _ store: TopicStore, _ dir: ReplayTempDir, _ name: String) -> String? {
        let path = dir.sub(name + ".jsonl")
        do {
            try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: false, encoding: .utf8)
            try Archive.verify(archive: path, against: store, from: 1, to: 300, chainBefore: .genesis, linesPerChunk: 7)
            return nil
        } catch {
            return "\(error)"
        }
    }

    /// Line `n` (1-based) with its device_id or token changed: it parses, but is another event.
    static func altered(_ lines: [String], _ n: Int) -> [String] {
        var lines = lines
        let line = lines[n - 1]
        lines[n - 1] = line.contains("\"device_id\":\"") ? line.replacingOccurrences(of: "\"device_id\":\"", with: "\"device_id\":\"x")
                                                         : line.replacingOccurrences(of: "\"token\":\"", with: "\"token\":\"x")
        #expect(lines[n - 1] != line)
        return lines
    }

    static func unparsable(_ lines: [String], _ n: Int) -> [String] {
        var lines = lines
        lines[n - 1] = "{\"seq\":" + String(lines[n - 1].dropFirst(7).prefix(20))
        return lines
    }

    @Test func theArchiveAsWrittenVerifies() throws {
        let dir = ReplayTempDir("archive-verify")
        let (store, lines) = try Self.source(dir)
        defer { store.close() }
        #expect(Self.verify(lines, store, dir, "whole") == nil)
        // As compaction writes it: zstd-compressed, then verified the same way.
        let summary = try Archive.write(from: store, from: 1, to: 300, into: dir.sub("archives"), chainBefore: .genesis)
        #expect(summary.records == 300)
        #expect(try Archive.records(at: summary.path).count == 300)
    }

    @Test func everyDifferenceIsFoundAndTheEarliestReported() throws {
        let dir = ReplayTempDir("archive-verify-faults")
        let (store, lines) = try Self.source(dir)
        defer { store.close() }
        for n in [1, 7, 8, 150, 300] {
            let error = Self.verify(Self.altered(lines, n), store, dir, "altered-\(n)")
            #expect(error?.contains("line \(n) (seq \(n)) does not re-encode") == true, "altered \(n): \(error ?? "verified")")
            let bad = Self.verify(Self.unparsable(lines, n), store, dir, "unparsable-\(n)")
            #expect(bad?.contains("line \(n)") == true && bad?.contains("re-encode") == false, "unparsable \(n): \(bad ?? "verified")")
        }
        // Of an altered line and a line that does not parse, the earlier: far apart, and in
        // the same chunk (the one that does not parse is read first, on the other thread).
        for later in [123, 200] {
            let first = Self.verify(Self.unparsable(Self.altered(lines, 120), later), store, dir, "altered-first-\(later)")
            #expect(first?.contains("line 120 (seq 120) does not re-encode") == true, "\(later): \(first ?? "verified")")
            let second = Self.verify(Self.altered(Self.unparsable(lines, 120), later), store, dir, "unparsable-first-\(later)")
            #expect(second?.contains("line 120") == true && second?.contains("re-encode") == false, "\(later): \(second ?? "verified")")
        }
        // Lines missing at the end, a line too many, a line out of order.
        let short = Self.verify(Array(lines.prefix(295)), store, dir, "short")
        #expect(short?.contains("it ends after 295 lines; record 296 is missing") == true, "\(short ?? "verified")")
        let long = Self.verify(lines + [lines[0]], store, dir, "long")
        #expect(long?.contains("holds more than 300 records") == true, "\(long ?? "verified")")
        var swapped = lines
        swapped.swapAt(9, 10)
        let order = Self.verify(swapped, store, dir, "swapped")
        #expect(order?.contains("line 10 holds seq 11, expected 10") == true, "\(order ?? "verified")")
    }

    /// However far ahead the reading thread is, a line that does not parse is thrown only
    /// after the records of the lines before it: the reader here has ended before the
    /// first record is asked for.
    @Test func aLineThatDoesNotParseComesAfterTheRecordsBeforeIt() throws {
        let dir = ReplayTempDir("archive-lines")
        let (store, lines) = try Self.source(dir)
        store.close()
        let path = dir.sub("bad.jsonl")
        try (Self.unparsable(Array(lines.prefix(20)), 10).joined(separator: "\n") + "\n").write(toFile: path, atomically: false, encoding: .utf8)
        let parsed = try ParsedArchiveLines(path: path, count: 20, chunkSize: 7)
        defer { parsed.cancel() }
        #expect(throws: Archive.Failure.self) { try parsed.lineAfterTheLast() }  // waits until the reading ended
        for seq in UInt64(1)...9 { #expect(try parsed.next()?.sequence == seq) }
        #expect(throws: Archive.Failure.self) { try parsed.next() }
    }
}
