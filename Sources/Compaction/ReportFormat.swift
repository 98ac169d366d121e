import Foundation
import SubscriptionLog

/// The compaction report for people and for scripts.
public enum CompactionReportFormat {
    public static func json(_ r: Compactor.Report) -> [String: Any] {
        var o: [String: Any] = [
            "dryRun": r.dryRun, "horizon": r.horizon, "previousHorizon": r.previousHorizon,
            "retentionHorizon": r.retentionHorizon, "logTrimmed": r.logTrimmed,
            "eventsRemoved": r.eventsRemoved, "eventsArchived": r.eventsArchived,
            "collected": ["devicesForgotten": r.devicesForgotten, "topicsDropped": r.topicsDropped,
                          "tokensExpired": r.tokensExpired, "notificationsRemoved": r.notificationsRemoved, "skippedOnRecheck": r.garbageSkipped,
                          "transactions": r.garbageTransactions, "longestTransactionSeconds": r.garbageLongestSeconds],
            "bytes": ["databaseBefore": r.databaseBytesBefore, "databaseAfter": r.databaseBytesAfter,
                      "totalBefore": r.totalBytesBefore, "totalAfter": r.totalBytesAfter,
                      "snapshot": r.snapshotBytes, "archive": r.archiveBytes, "archiveJSON": r.archiveJSONBytes],
            "generationBefore": r.generationBefore, "generationAfter": r.generationAfter,
            "catchUpRounds": r.catchUpRounds, "recordsCaughtUp": r.recordsCaughtUp,
            "recordsAtSwitch": r.recordsAtSwitch, "writePauseSeconds": r.writePauseSeconds,
            "leftoversRemoved": r.leftoversRemoved,
            "space": spaceJSON(r.space),
            "phases": r.phases.map { ["phase": $0.0, "seconds": $0.1] as [String: Any] },
            "seconds": r.seconds,
        ]
        if let t = r.horizonTime { o["horizonTime"] = t }
        if let a = r.archivePath { o["archive"] = a }
        if let f = r.firstBefore { o["firstSeqBefore"] = f }
        if let l = r.lastBefore { o["lastSeqBefore"] = l }
        return o
    }

    static func spaceJSON(_ p: SpacePlan) -> [String: Any] {
        var o: [String: Any] = ["needed": p.needed, "available": p.available, "neededGarbageOnly": p.neededGarbageOnly,
                                "copy": p.copyBytes, "newFile": p.newFileBytes, "snapshot": p.projectionBytes, "logRemoved": p.logBytesRemoved,
                                "archive": p.archiveBytes, "garbage": p.garbageBytes]
        if let n = p.archiveNeeded, let a = p.archiveAvailable {
            o["archiveFilesystem"] = ["needed": n, "available": a] as [String: Any]
        }
        return o
    }

    public static func text(_ r: Compactor.Report) -> String {
        var lines: [String] = []
        let would = r.dryRun ? "would " : ""
        if r.dryRun { lines.append("dry run: nothing was changed") }
        if let first = r.firstBefore, let last = r.lastBefore {
            lines.append("log before: seq \(first)…\(last)")
        } else {
            lines.append("log before: empty")
        }
        if !r.logTrimmed {
            let older = r.retentionHorizon - r.previousHorizon
            lines.append("log: not trimmed (--no-file)" + (older == 0 ? "" :
                ": \(older) events (seq \(r.previousHorizon + 1)…\(r.retentionHorizon)) are older than the retention window and stay in the log"))
        } else if r.horizon > r.previousHorizon {
            let at = r.horizonTime.map { " (\(iso($0)))" } ?? ""
            lines.append("horizon: seq \(r.horizon)\(at); \(would)remove \(r.eventsRemoved) events (seq \(r.previousHorizon + 1)…\(r.horizon))")
        } else {
            lines.append("horizon: unchanged at seq \(r.previousHorizon): no event is older than the retention window")
        }
        if let a = r.archivePath {
            lines.append("archive: \(r.eventsArchived) events in \(a), \(bytes(r.archiveBytes)) (\(bytes(r.archiveJSONBytes)) of JSON), verified against the log")
        } else if r.dryRun && r.eventsArchived > 0 {
            lines.append("archive: would write \(r.eventsArchived) events")
        } else if r.eventsRemoved > 0 {
            lines.append("archive: none: the \(r.eventsRemoved) removed events \(r.dryRun ? "would be" : "are") deleted, not archived (--archive DIR keeps them)")
        }
        lines.append("garbage: \(would)forget \(r.devicesForgotten) device(s), drop \(r.topicsDropped) topic(s), expire \(r.tokensExpired) token(s)"
                     + (r.garbageSkipped > 0 ? " (\(r.garbageSkipped) changed since the scan and were kept)" : "")
                     + (r.garbageTransactions > 0 ? String(format: "; %d write transaction(s), the longest %.0f ms", r.garbageTransactions, r.garbageLongestSeconds * 1000) : ""))
        if r.notificationsRemoved > 0 {
            lines.append("notifications: \(would)remove \(r.notificationsRemoved) sent before the retention window (records, audiences, opens)")
        }
        if !r.leftoversRemoved.isEmpty {
            lines.append("leftovers of an interrupted run \(r.dryRun ? "found" : "removed"): \(r.leftoversRemoved.count) ("
                         + r.leftoversRemoved.joined(separator: ", ") + ")")
        }
        if !r.dryRun {
            lines.append("file: \(bytes(r.databaseBytesBefore)) → \(bytes(r.databaseBytesAfter)) (generation \(name(r.generationBefore)) → \(name(r.generationAfter)))"
                         + "; store directory \(bytes(r.totalBytesBefore)) → \(bytes(r.totalBytesAfter))")
            if r.generationAfter != r.generationBefore {
                lines.append(String(format: "switch: writers held %.0f ms while %llu record(s) were folded in (%d catch-up round(s), %llu records)",
                                    r.writePauseSeconds * 1000, r.recordsAtSwitch, r.catchUpRounds, r.recordsCaughtUp))
            }
        } else {
            lines.append("file: \(bytes(r.databaseBytesBefore)) now")
        }
        if r.space.needed > 0 {
            var line = "space: \(r.dryRun ? "needs" : "needed") about \(bytes(r.space.needed)) free at its peak, \(bytes(r.space.available)) \(r.dryRun ? "is" : "was") free"
            if let n = r.space.archiveNeeded, let a = r.space.archiveAvailable {
                line += "; the archive's filesystem \(bytes(n)) of \(bytes(a))"
            }
            if r.dryRun && !r.space.fits { line += ": NOT ENOUGH, a run would be refused" }
            lines.append(line)
        }
        let phases = r.phases.filter { $0.1 >= 0.005 }.map { String(format: "%@ %.2f s", $0.0, $0.1) }.joined(separator: ", ")
        lines.append(String(format: "done in %.2f s", r.seconds) + (phases.isEmpty ? "" : " (\(phases))"))
        return lines.joined(separator: "\n")
    }

    static func name(_ generation: String) -> String { generation.isEmpty ? "(top)" : generation }

    public static func bytes(_ n: Int) -> String {
        let v = Double(n)
        switch v {
        case 1e9...: return String(format: "%.2f GB", v / 1e9)
        case 1e6...: return String(format: "%.1f MB", v / 1e6)
        case 1e3...: return String(format: "%.1f kB", v / 1e3)
        default: return "\(n) B"
        }
    }

    static func iso(_ ms: Int64) -> String { TimeText.iso(ms) }
}
