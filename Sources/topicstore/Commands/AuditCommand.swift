import AccessControl
import Foundation
import LMDB
import Projections
import Replay
import SubscriptionLog
import TopicStore

/// `topicstore audit`: the log verified and the projections compared with a rebuild.
enum AuditCommand: Command {
    static let spec = CommandSpec(
        name: "audit",
        summary: "walk data.mdb page by page, verify the log (gaps, checksums, hash chain), compare every projection entry with a rebuild, check the access tables",
        usage: "audit [--data DIR] [--expect-head SEQ:HEX] [--scratch DIR] [--memory-budget MIB] [--file-only] [--json]",
        options: [
            .init(name: "expect-head", value: "SEQ:HEX", help: "a head published earlier: the link at SEQ must be HEX"),
            .init(name: "scratch", value: "DIR", help: "where the temporary rebuild goes (default the system temp directory); "
                  + "made if missing, as one directory in an existing parent, and removed afterwards"),
            .init(name: "max-report", value: "N", help: "most issues and differences listed (default 1000; all are counted)"),
            .init(name: "file-only", value: nil, help: "walk data.mdb page by page only (its structure: about 0.3 s per GB), skip the log and projections"),
            .init(name: "memory-budget", value: "MIB", help: "memory for the rebuild before it is written in rounds (default a third of RAM, at most 8192; 0: write through)"),
        ],
        details: """
        First data.mdb is walked page by page (copied out of its own map of the file, never read
        through LMDB, which trusts its pages; the tables on two threads): every tree's pages, keys in order under their branch keys, overflow pages,
        the free list and both meta pages; an issue names the table, the page and its offset,
        and stops the audit there (exit 4).
        Exit 0 only when the log is intact and every projection entry equals the rebuild's;
        exit 4 otherwise, with each log issue located by sequence and each difference named by
        project, topic or device and what each side holds, and each access record (project or API
        key) that does not decode or names a project that does not exist. The head (sequence and SHA-256 chain
        link) is printed so it can be anchored outside this machine and checked later with
        --expect-head. Runs beside a serving store without blocking its writes.
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        var options = Audit.Options()
        if let text = arguments.value("expect-head") {
            guard let head = ChainHead(parsing: text) else { throw UsageError(description: "--expect-head must be SEQ:HEX (64 hex digits)") }
            options.expectedHead = head
        }
        if let dir = arguments.value("scratch") { options.scratchDirectory = dir }
        if let n = try arguments.integer("max-report") {
            guard n >= 0 else { throw UsageError(description: "--max-report must not be negative") }
            options.maxReported = n
        }
        if let mib = try arguments.integer("memory-budget") {
            guard mib >= 0 else { throw UsageError(description: "--memory-budget must not be negative") }
            options.memoryBudget = mib == 0 ? nil : mib << 20
        }
        // The file first, page by page outside LMDB: LMDB trusts every page it reads, and a
        // damaged one can kill the process (or hide records) before anything is reported.
        let clock = ContinuousClock.now
        let file = try TopicStore.checkFileStructure(directory: arguments.dataDirectory, maxIssues: options.maxReported)
        let elapsed = clock.duration(to: .now).components
        let fileSeconds = Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18
        // Log keys out of order (in otherwise whole leaf pages) do not stop the rest: LMDB reads
        // such pages safely, and the log verifier locates each record by its key and its own
        // sequence, then goes on checking past it (later damage would go unreported otherwise).
        let readable = file.isSound || TopicStore.onlyLogKeysAreOutOfOrder(file)
        guard readable else {
            if arguments.json {
                Console.printJSON(["ok": false, "file": fileJSON(file, seconds: fileSeconds)])
            } else {
                printFile(file, seconds: fileSeconds)
                print("log and projections: not read: LMDB trusts the pages it reads, and this file's are damaged (restore the store from a backup or a compaction snapshot)")
                print("FAILED")
            }
            return .verificationFailed
        }
        if arguments.has("file-only") {
            if arguments.json { Console.printJSON(["ok": true, "file": fileJSON(file, seconds: fileSeconds)]) } else {
                printFile(file, seconds: fileSeconds)
                print("OK (the file only: the log and projections were not verified)")
            }
            return .success
        }
        let store = try TopicStore(directory: arguments.dataDirectory, options: .longRead)
        let bar = ProgressBar(arguments: arguments)
        let report = try Audit.run(store, options: options, progress: bar.update)
        bar.finish()
        // The access tables: serve trusts them for every request.
        let access = try AccessControl(store: store).check()
        let clean = report.isClean && file.isSound && access.issues.isEmpty
        if arguments.json {
            var object: [String: Any] = [
                "ok": clean, "file": fileJSON(file, seconds: fileSeconds), "recordsChecked": report.recordsChecked,
                "linksUnchecked": report.linksUnchecked,
                "logIssueCount": report.logIssueCount, "differenceCount": report.differenceCount,
                "projectionsCompared": report.projectionsCompared, "entriesCompared": report.entriesCompared,
                "equivalentEncodings": report.equivalentEncodings,
                "olderSchema": report.olderSchema.map { Int($0) as Any } ?? NSNull(),
                "comparedAsOfSeq": report.comparedAsOf, "seconds": report.seconds,
                "logIssues": report.logIssues.map { ["seq": $0.sequence, "kind": $0.kind.rawValue, "message": $0.message] as [String: Any] },
                "differences": report.differences.map { d -> [String: Any] in
                    var o: [String: Any] = ["table": d.table, "subject": d.subject, "asOfSeq": d.asOfSeq]
                    if let p = d.project { o["project"] = p }
                    o["live"] = d.live ?? NSNull()
                    o["rebuilt"] = d.rebuilt ?? NSNull()
                    return o
                },
            ]
            object["access"] = ["projects": access.projects, "keys": access.keys,
                                "issues": access.issues.map { ["table": $0.table, "key": $0.key, "message": $0.message] }] as [String: Any]
            if let h = report.head { object["head"] = ["seq": h.sequence, "hash": h.hash.hex] }
            if let s = report.foldStop { object["foldStoppedAt"] = ["seq": s.sequence, "kind": s.kind.rawValue, "message": s.message] }
            Console.printJSON(object)
        } else {
            printFile(file, seconds: fileSeconds)
            if let h = report.head {
                print("head: seq \(h.sequence) sha256 \(h.hash.hex)")
                // Only a head that audited clean is one to publish.
                if clean { print("      (anchor it: topicstore audit --expect-head \(h))") }
            } else if report.recordsChecked > 0 {
                print("head: its link cannot be computed: a record after the last one keeping its whole link is damaged")
            } else {
                print("head: the log is empty")
            }
            print("log: \(report.recordsChecked) records checked, \(report.logIssueCount) issue(s)")
            for issue in report.logIssues { print("  \(issue)") }
            if report.logIssueCount > report.logIssues.count { print("  … and \(report.logIssueCount - report.logIssues.count) more") }
            if report.linksUnchecked > 0 {
                // A version 5 record keeps 8 bytes of its link: only the whole link before it checks them.
                print("  \(report.linksUnchecked) record(s) after a damaged one could not have their links checked "
                      + "(the chain is taken up at the next record keeping its whole link, every 64th)")
            }
            if report.projectionsCompared {
                print("projections: \(report.entriesCompared) entries compared as of seq \(report.comparedAsOf), \(report.differenceCount) difference(s)")
                if report.equivalentEncodings > 0 {
                    // An older store's entries that no change has rewritten since (schema 10: chunks and topic lists).
                    print("  \(report.equivalentEncodings) of them in an older or another encoding, the same as the rebuild's")
                }
                if let older = report.olderSchema {
                    print("  the store is at schema \(older), the rebuild at \(ProjectionTables.schemaVersion): "
                          + "a writer's next open brings it to \(ProjectionTables.schemaVersion)")
                }
            } else {
                print("projections: not compared: the log cannot be folded past \(report.foldStop.map { "\($0)" } ?? "a damaged record")")
            }
            for d in report.differences { print("  \(d)") }
            if report.differenceCount > report.differences.count { print("  … and \(report.differenceCount - report.differences.count) more") }
            print("access: \(access.projects) projects, \(access.keys) keys checked, \(access.issues.count) issue(s)")
            for issue in access.issues { print("  \(issue)") }
            print(String(format: "%@ in %.2f s (rebuild %.2f s)", clean ? "OK" : "FAILED", report.seconds, report.rebuildSeconds))
        }
        return clean ? .success : .verificationFailed
    }

    static func printFile(_ file: FileStructure, seconds: Double) {
        let tables = file.tables.filter { !$0.name.hasPrefix("(") }.count
        print(String(format: "file: %d pages of %d bytes walked (%d tables, %d pages free) at transaction %d in %.2f s, %d issue(s)",
                     file.lastPage + 1, file.pageSize, tables, file.freePages, file.transactionID, seconds, file.issueCount))
        for issue in file.issues { print("  \(issue)") }
        if file.issueCount > file.issues.count { print("  … and \(file.issueCount - file.issues.count) more") }
    }

    static func fileJSON(_ file: FileStructure, seconds: Double) -> [String: Any] {
        [
            "pages": file.lastPage + 1, "pageSize": file.pageSize, "freePages": file.freePages, "transaction": file.transactionID,
            "seconds": seconds, "issueCount": file.issueCount,
            "issues": file.issues.map { i -> [String: Any] in
                var o: [String: Any] = ["table": i.table, "message": i.message]
                if let p = i.page { o["page"] = p }
                if let off = i.offset { o["offset"] = off }
                return o
            },
        ]
    }
}
