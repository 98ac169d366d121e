import EventJSON
import Foundation
import Replay
import Synchronization
import SubscriptionLog
import TopicStore

/// `topicstore load`: bulk-applies commands given as JSON Lines.
enum LoadCommand: Command {
    static let stopsOnSignal = true
    static let spec = CommandSpec(
        name: "load",
        summary: "apply commands given as JSON Lines (a file, or - for standard input)",
        usage: "load [--data DIR] [--stop-on-error] [--no-sync] [--batch N] [--retime] FILE|-",
        options: [
            .init(name: "stop-on-error", value: nil, help: "stop at the first bad line (default: report it, skip it, go on)"),
            .init(name: "no-sync", value: nil, help: "do not fsync each commit (faster; a machine crash may lose the tail)"),
            .init(name: "batch", value: "N", help: "commands per commit (default 4096)"),
            .init(name: "project", value: "NAME", help: "project for lines that name none"),
            .init(name: "retime", value: nil, help: "load lines whose ts is before the store's last time, giving them later times"),
        ],
        details: """
        One command per line:
          {"project":"demo","type":"token","device_id":"D1","token":"…","platform":"ios"}
          {"project":"demo","type":"register","device_id":"D1","topics":[{"code":"news","title":"News","single":false}]}
          {"project":"demo","type":"unregister","device_id":"D1","topics":["news"]}
          {"project":"demo","type":"unregister-all","device_id":"D1"}
          {"project":"demo","type":"token-rejected","token":"…","at":1764100807728}
        A bad line is reported on standard error with its line number and never half-applied.
        Lines from `topicstore export` load as they are, with the garbage collector's
        forget-device, drop-topic and expire-token lines. Their seq is ignored; their ts
        (ms since 1970, years 2000…2200) is kept, so an export loaded into an empty store
        folds to the same projections: a rejection applies only to a token registered
        before it, compared by time. Times in the log never go back, so a line whose ts is
        before the store's last time (or the line before it) stops the load (exit 5):
        given a later time, its token would look newer than the rejections after it, and
        they would be ignored. Load such a file into an empty store (or `import` it), or
        pass --retime to load it with later times anyway. A ts more than a minute ahead of
        the clock is a bad line. `import` also keeps seq and the chain.
        zstd-compressed input (a `topicstore compact --archive` file, *.jsonl.zst) is
        recognised and decompressed as it streams; a damaged stream stops the load (exit 5).
        SIGTERM or SIGINT stops reading (at once, even while standard input is waiting), commits
        what was read, prints the usual summary with the last line read ("stopped by SIGTERM after
        line N") and exits 6: every line up to N is applied or reported; resume at line N+1
        (tail -n +N+1 FILE). A further signal while that commit finishes is ignored.
        A store that cannot commit (a full disk, an I/O error) stops the load at once: it
        names the error and the lines not applied, and says where to resume (exit 1).
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        guard arguments.positionals.count == 1 else { throw UsageError(description: "load takes one FILE (or - for standard input)") }
        let batchSize = try arguments.integer("batch") ?? 4096
        guard batchSize > 0 else { throw UsageError(description: "--batch must be positive") }
        let reader = try LineReader(path: arguments.positionals[0])
        var options = TopicStore.Options()
        if arguments.has("no-sync") { options.durability = .noSync }
        options.maxBatch = batchSize
        let store = try TopicStore(directory: arguments.dataDirectory, options: options)
        defer { store.close() }
        // Refused before any line is read (each commit would refuse it too).
        try store.requireLog()

        // SIGTERM/SIGINT: stop reading at the next line and finish as at the end of the input.
        let signalled = Atomic<Int32>(0)
        // (Blocked since main started this command, so one sent while the store was opening counts too.)
        StopSignals.wait { sig in _ = signalled.compareExchange(expected: 0, desired: sig, ordering: .relaxed) }
        reader.shouldStop = { signalled.load(ordering: .relaxed) != 0 }

        let stopOnError = arguments.has("stop-on-error")
        let retime = arguments.has("retime")
        // A line's ts must not be before the log's last time, nor before an earlier line's.
        let storeTime = try store.read { txn in try store.log.bounds(txn)?.lastTimestamp } ?? 0
        let nextSequence = try store.read { txn in try store.tables.appliedSequence(txn) } + 1
        var warnedAboutExport = false
        var lineTime: Int64 = 0
        /// Records committed with a later time than their line's ts (--retime, or
        /// another process committing meanwhile).
        var retimed = 0
        let started = Date()
        var lineNumber = 0
        var applied = 0, invalid = 0, failed = 0
        var firstSeq: UInt64?, lastSeq: UInt64?
        var stopped = false
        /// The store could not commit (not a bad line): the error and the lines it refused.
        var storeFailure: (error: any Error, lines: [Int])?
        var lastAppliedLine = 0
        var batch: [Event] = []
        var batchTimes: [Int64?] = []
        var batchLines: [Int] = []
        var inFlightTimes: [Int64?] = []
        // One batch commits while the next is parsed: waiting for each commit
        // before parsing on left the writer idle half the time (58k commands/s
        // against 100k+ for the same commands submitted ready-made).
        var inFlight: (results: SubmittedBatch, lines: [Int])?

        func settle() {
            guard let (pending, lines) = inFlight else { return }
            inFlight = nil
            for (i, result) in pending.wait().enumerated() {
                switch result {
                case .success(let receipt):
                    applied += 1
                    if let given = inFlightTimes[i], receipt.timestamp > given { retimed += 1 }
                    if firstSeq == nil { firstSeq = receipt.sequence }
                    lastSeq = receipt.sequence
                    lastAppliedLine = max(lastAppliedLine, lines[i])
                case .failure(let error as InvalidCommand):
                    failed += 1
                    Console.printError("line \(lines[i]): not applied: \(error)")
                case .failure(let error):
                    // The store failed, not the line: every later line would fail the same way.
                    failed += 1
                    if storeFailure == nil { storeFailure = (error, []) }
                    storeFailure!.lines.append(lines[i])
                }
            }
        }

        /// Submits the batch, then reports the one before it (in line order).
        func flush() {
            guard !batch.isEmpty else { return }
            let submitted = store.submitBatch(batch, at: batchTimes)
            settle()
            inFlight = (submitted, batchLines)
            inFlightTimes = batchTimes
            batch.removeAll(keepingCapacity: true)
            batchTimes.removeAll(keepingCapacity: true)
            batchLines.removeAll(keepingCapacity: true)
        }

        // On a terminal, from a file: how much of it is read (a line's error clears the bar first).
        let bar = ProgressBar(arguments: arguments)
        while storeFailure == nil, signalled.load(ordering: .relaxed) == 0, let line = reader.next() {
            lineNumber += 1
            if lineNumber % 4096 == 0, let at = reader.position { bar.update(ReplayProgress(phase: "load", done: at.read, total: at.size)) }
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { continue }
            do {
                let text = String(decoding: line, as: UTF8.self)
                let (event, time, exportedSeq) = try EventJSON.exportedEvent(fromLine: text, defaultProject: arguments.value("project"))
                if let exportedSeq, !warnedAboutExport {
                    warnedAboutExport = true
                    // A slice of an export loads as new commands: the store then holds only the slice's effects.
                    if exportedSeq != nextSequence {
                        bar.finish()
                        Console.printError("""
                            note: line \(lineNumber) is record \(exportedSeq) of an export, and this store's next sequence is \(nextSequence): load applies \
                            the lines as new commands, so the store will hold the effects of these records alone, not the state as of \
                            seq \(exportedSeq - 1) and after. To rebuild a store exactly, topicstore import a full export into a new directory.
                            """)
                    }
                }
                if let time {
                    let now = Int64(Date().timeIntervalSince1970 * 1000)
                    if time > now + 60_000 {
                        throw InvalidCommand([ValidationError(field: "ts", message:
                            "The ts \(TimeText.iso(time)) is in the future (the clock says \(TimeText.iso(now))): a record's time is when it was committed.")])
                    }
                    if time < max(storeTime, lineTime) && !retime {
                        let what = lineTime > storeTime ? "a line before it" : "the store's last time"
                        invalid += 1
                        stopped = true
                        bar.finish()
                        Console.printError("""
                            line \(lineNumber): ts \(TimeText.iso(time)) is before \(what), \(TimeText.iso(max(storeTime, lineTime))): stopped
                              times in the log never go back, so this line would get a later time, and a rejection after it
                              in the file would then be ignored as older than the token. Load the file into an empty store
                              (or `topicstore import` it), or pass --retime to load it with later times anyway.
                            """)
                        break
                    }
                    lineTime = max(lineTime, time)
                }
                batch.append(event)
                batchTimes.append(time)
                batchLines.append(lineNumber)
            } catch {
                invalid += 1
                bar.finish()
                Console.printError("line \(lineNumber): \(error)")
                if stopOnError { stopped = true; break }
                continue
            }
            if batch.count >= batchSize { flush() }
        }
        if storeFailure == nil { flush() }
        settle()
        bar.finish()
        if let failure = reader.failure {
            Console.printError("after line \(lineNumber): \(failure)")
            invalid += 1
            stopped = true
        }

        let signal = signalled.load(ordering: .relaxed)
        let signalName = signal == SIGINT ? "SIGINT" : "SIGTERM"
        let seconds = Date().timeIntervalSince(started)
        if arguments.json {
            var report: [String: Any] = ["applied": applied, "invalid": invalid, "failed": failed,
                                         "lines": lineNumber, "stopped": stopped, "seconds": seconds]
            if retimed > 0 { report["retimed"] = retimed }
            if let firstSeq { report["firstSeq"] = firstSeq }
            if let lastSeq { report["lastSeq"] = lastSeq }
            if signal != 0 { report["stopped"] = true; report["signal"] = signalName }
            if let storeFailure, let first = storeFailure.lines.min() {
                report["stopped"] = true
                report["storeError"] = "\(storeFailure.error)"
                report["notAppliedLines"] = [first, storeFailure.lines.max() ?? first]
                report["resumeAtLine"] = first
            }
            Console.printJSON(report)
        } else {
            if let storeFailure, let first = storeFailure.lines.min(), let last = storeFailure.lines.max() {
                var text = "stopped after line \(lineNumber): the store could not commit: \(storeFailure.error)\n"
                text += "  \(storeFailure.lines.count) command(s) not applied (lines \(first)…\(last)); every line before \(first) is applied or reported"
                if lastAppliedLine > first {
                    text += "\n  lines after \(last) up to \(lastAppliedLine) were applied: re-apply lines \(first)…\(last) only"
                } else {
                    text += "\n  resume at line \(first) (tail -n +\(first) FILE)"
                }
                Console.printError(text)
            }
            let rate = seconds > 0 ? Int(Double(applied) / seconds) : applied
            var text = signal != 0 ? "stopped by \(signalName) after line \(lineNumber) (resume at line \(lineNumber + 1)): " : ""
            text += "applied \(applied) commands"
            if let firstSeq, let lastSeq { text += " (seq \(firstSeq)…\(lastSeq))" }
            text += " in \(String(format: "%.2f", seconds)) s, \(rate)/s"
            if invalid > 0 { text += "; \(invalid) invalid line(s) \(stopped ? "— stopped at the first" : "skipped")" }
            if failed > 0 { text += "; \(failed) not applied" }
            if retimed > 0 {
                text += retime ? "; \(retimed) given a later time than their ts (--retime)"
                    : "; \(retimed) given a later time than their ts: another process committed meanwhile, so a rejection among them may have been compared with the later time"
            }
            print(text)
        }
        if failed > 0 { return .failure }
        if signal != 0 { return .interrupted }
        return invalid > 0 ? .invalidInput : .success
    }
}

