import EventJSON
import Foundation
import Replay
import SubscriptionLog
import TopicStore

/// `topicstore history`: a device's timeline or a topic's subscriber flow, from the log.
enum HistoryCommand: Command {
    static let spec = CommandSpec(
        name: "history",
        summary: "a device's timeline, or a topic's subscribe/unsubscribe flow and subscriber count over time",
        usage: "history [--data DIR] --project P (--device ID | --topic CODE) [--json | --csv] [--svg FILE]",
        options: [
            .init(name: "project", value: "P", help: "the project"),
            .init(name: "device", value: "ID", help: "a device_id: token changes, subscriptions, rejections"),
            .init(name: "topic", value: "CODE", help: "a topic code: every subscribe and unsubscribe with the count after it"),
            .init(name: "csv", value: nil, help: "print CSV"),
            .init(name: "svg", value: "FILE", help: "with --topic: draw the subscriber count over time into FILE and print a "
                  + "summary of it (the listing too only with --json or --csv)"),
        ],
        details: """
        Each entry has its log sequence and time, so `topicstore replay --to-seq N` shows the
        whole store at that moment. Answers "when did this device stop getting news pushes?"
        (the entry whose topics no longer list news, or whose state leaves live).
        A project the store does not know has no history (exit 0); standard error says so,
        and --json adds "unknownProject": true.
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        guard let project = arguments.value("project") else { throw UsageError(description: "--project is required") }
        if arguments.json && arguments.has("csv") { throw UsageError(description: "give --json or --csv, not both") }
        let bar = ProgressBar(arguments: arguments)
        switch (arguments.value("device"), arguments.value("topic")) {
        case (let device?, nil):
            if arguments.value("svg") != nil { throw UsageError(description: "--svg draws a topic's subscribers: use it with --topic") }
            let store = try TopicStore(directory: arguments.dataDirectory, options: .longRead)
            let timeline = try History.device(device, project: project, in: store, progress: bar.update)
            let known = try knowsProject(project, store, bar)
            printDevice(timeline, known: known, arguments, ListingProgress(bar, lines: timeline.entries.count))
        case (nil, let code?):
            let store = try TopicStore(directory: arguments.dataDirectory, options: .longRead)
            let flow = try History.topic(code, project: project, in: store, progress: bar.update)
            let known = try knowsProject(project, store, bar)
            if let file = arguments.value("svg") {
                do { try SubscriberChart.svg(flow).write(toFile: file, atomically: true, encoding: .utf8) } catch {
                    throw ChartWriteError(description: "cannot write \(file): \(error.localizedDescription)")  // exit 1, not a usage error
                }
                // The chart is what was asked for: the listing (as long as the
                // flow: a million lines for a popular topic) only on request.
                if !arguments.json && !arguments.has("csv") {
                    bar.finish()
                    print(chartSummary(flow, file: file))
                    return .success
                }
            }
            printTopic(flow, known: known, arguments, ListingProgress(bar, lines: flow.points.count))
        default:
            throw UsageError(description: "give one of --device ID or --topic CODE")
        }
        return .success
    }

    /// Whether the store has `project`. An unknown one is not an error, as for `audience`
    /// and `topics`: the answer is empty, standard error names it, `--json` adds `"unknownProject": true`.
    static func knowsProject(_ project: String, _ store: TopicStore, _ bar: ProgressBar) throws -> Bool {
        let known = try store.read { txn in try store.reader.project(named: project, txn) != nil } || Console.isRegistered(project, in: store)
        if !known {
            bar.finish()  // the message on a clean line
            Console.printError(Console.unknownProject(project) + "; the answer is empty")
        }
        return known
    }

    /// One line on what `--svg` drew: points, sequences, times, subscriber range.
    static func chartSummary(_ f: History.TopicFlow, file: String) -> String {
        let head = "wrote \(file): subscribers of \(f.code) in project \(f.project), "
        guard let first = f.points.first, let last = f.points.last else {
            return head + "no subscribe or unsubscribe in the log (read through seq \(f.asOfSeq))"
        }
        // The chart starts at 0 before the first change, or at a compaction snapshot's count.
        let low = first.change == 0 ? f.points.lazy.map(\.subscribers).min()! : 0
        let high = f.points.lazy.map(\.subscribers).max()!
        return head + "\(f.points.count) point(s) from seq \(first.sequence) to seq \(last.sequence) "
            + "(\(TimeArgument.iso(first.timestamp)) to \(TimeArgument.iso(last.timestamp))), "
            + "\(low) to \(high) subscriber(s), \(f.subscribers) as of seq \(f.asOfSeq)"
    }

    static func csvField(_ s: String) -> String {
        s.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" }) ? "\"" + s.replacingOccurrences(of: "\"", with: "\"\"") + "\"" : s
    }

    static func printDevice(_ t: History.DeviceTimeline, known: Bool, _ arguments: Arguments, _ progress: ListingProgress) {
        let out = OutputBuffer()
        if arguments.json {
            let entries = t.entries.map { e -> [String: Any] in
                var o: [String: Any] = ["seq": e.sequence, "ts": e.timestamp, "time": TimeArgument.iso(e.timestamp),
                                        "kind": e.kind.rawValue, "detail": e.detail, "topics": e.topics, "state": e.state]
                if !e.subscribed.isEmpty { o["subscribed"] = e.subscribed }
                if !e.unsubscribed.isEmpty { o["unsubscribed"] = e.unsubscribed }
                if let tok = e.token { o["token"] = tok }
                if let p = e.platform { o["platform"] = p }
                return o
            }
            var object: [String: Any] = ["project": t.project, "device_id": t.deviceID, "asOfSeq": t.asOfSeq, "entries": entries]
            if let h = t.horizon { object["horizon"] = h }
            if !known { object["unknownProject"] = true }
            out.write(Console.jsonString(object) + "\n")
        } else if arguments.has("csv") {
            out.write("seq,ts,time,kind,detail,subscribed,unsubscribed,topics,state,token,platform\n")
            for (i, e) in t.entries.enumerated() {
                progress.line(i)
                out.append { b in
                    b.add("\(e.sequence),\(e.timestamp),"); TimeText.appendISO(e.timestamp, to: &b)
                    for field in [e.kind.rawValue, e.detail, e.subscribed.joined(separator: " "), e.unsubscribed.joined(separator: " "),
                                  e.topics.joined(separator: " "), e.state, e.token ?? "", e.platform ?? ""] {
                        b.add(","); b.add(csvField(field))
                    }
                    b.add("\n")
                }
            }
        } else {
            out.write("device \(t.deviceID) in project \(t.project): \(t.entries.count) event(s), log read through seq \(t.asOfSeq)\n")
            if let h = t.horizon {
                let held = t.entries.first?.kind == .horizon
                out.write("the log was compacted at seq \(h): \(held ? "the first entry is the device as the snapshot there holds it" : "the snapshot there holds no such device"); the events before are in the compaction archive\n")
            }
            for (i, e) in t.entries.enumerated() {
                progress.line(i)
                out.append { b in
                    b.add("seq \(e.sequence)  "); TimeText.appendISO(e.timestamp, to: &b)
                    b.add("  \(e.kind.rawValue): \(e.detail)")
                    if !e.subscribed.isEmpty { b.add("  +[\(e.subscribed.joined(separator: ", "))]") }
                    if !e.unsubscribed.isEmpty { b.add("  -[\(e.unsubscribed.joined(separator: ", "))]") }
                    if e.state == "absent" {
                        b.add("  → no such device\n")
                    } else {
                        b.add("  → \(e.state), topics [\(e.topics.joined(separator: ", "))]\n")
                    }
                }
            }
        }
        out.flush()
        progress.finish()
    }

    static func printTopic(_ f: History.TopicFlow, known: Bool, _ arguments: Arguments, _ progress: ListingProgress) {
        let out = OutputBuffer()
        if arguments.json {
            var object: [String: Any] = ["project": f.project, "topic": f.code, "asOfSeq": f.asOfSeq, "subscribers": f.subscribers]
            if let c = f.createdSeq { object["createdSeq"] = c }
            if let h = f.horizon { object["horizon"] = h }
            if !known { object["unknownProject"] = true }
            if !f.lifecycle.isEmpty {
                object["lifecycle"] = f.lifecycle.map { e -> [String: Any] in
                    var o: [String: Any] = ["event": e.kind.rawValue, "seq": e.sequence]
                    if let ts = e.timestamp { o["ts"] = ts }
                    return o
                }
            }
            // Points are written one by one: a popular topic has millions.
            out.write(String(Console.jsonString(object).dropLast()) + ",\"points\":[")
            for (i, p) in f.points.enumerated() {
                progress.line(i)
                if i > 0 { out.write(",") }
                var line = "{\"seq\":\(p.sequence),\"ts\":\(p.timestamp),\"device_id\":"
                line += JSONText.quoted(p.deviceID)
                line += ",\"change\":\(p.change),\"cause\":\"\(p.cause)\",\"subscribers\":\(p.subscribers)}"
                out.write(line)
            }
            out.write("]}\n")
        } else if arguments.has("csv") {
            out.write("seq,ts,time,device_id,change,cause,subscribers\n")
            for (i, p) in f.points.enumerated() {
                progress.line(i)
                out.append { b in
                    b.add("\(p.sequence),\(p.timestamp),"); TimeText.appendISO(p.timestamp, to: &b)
                    b.add(","); b.add(csvField(p.deviceID)); b.add(",\(p.change),\(p.cause),\(p.subscribers)\n")
                }
            }
        } else {
            var head = "topic \(f.code) in project \(f.project): "
            if f.lifecycle.isEmpty {
                head += "never created, "
            } else {
                // created at seq 2 (…), dropped at seq 6 (…), created again at seq 7 (…)
                head += f.lifecycle.enumerated().map { i, e in
                    let what = e.kind == .dropped ? "dropped" : (i == 0 ? "created" : "created again")
                    return "\(what) at seq \(e.sequence) (\(e.timestamp.map(TimeArgument.iso) ?? "before the compaction horizon"))"
                }.joined(separator: ", ")
                head += f.exists ? ", " : ", so it no longer exists; "
            }
            let changes = f.points.count { $0.change != 0 }
            head += "\(f.subscribers) subscriber(s) as of seq \(f.asOfSeq), \(changes) change(s)\n"
            if let h = f.horizon {
                head += "the log was compacted at seq \(h): the flow starts from the subscribers the snapshot there holds; the events before are in the compaction archive\n"
            }
            out.write(head)
            for (i, p) in f.points.enumerated() {
                progress.line(i)
                out.append { b in
                    b.add("seq \(p.sequence)  "); TimeText.appendISO(p.timestamp, to: &b)
                    if p.cause == "drop-topic" {
                        b.add("  drop-topic: the topic was removed (garbage collection: no subscribers)\n")
                    } else if p.change == 0 {
                        b.add("  \(p.cause): \(p.subscribers) subscriber(s) in the snapshot\n")
                    } else {
                        b.add(p.change > 0 ? "  + " : "  - "); b.add(p.deviceID); b.add(" (\(p.cause))  → \(p.subscribers)\n")
                    }
                }
            }
        }
        out.flush()
        progress.finish()
    }
}

/// The bar's second phase, `output`: lines of the listing written. The scan
/// alone reaches 100% long before a million lines are out. Drawn only when
/// standard output is not a terminal (on one, the lines show the progress and
/// the bar would tangle with them: it is cleared before the first line).
struct ListingProgress {
    private let bar: ProgressBar?
    private let total: UInt64

    init(_ bar: ProgressBar, lines: Int) {
        self.bar = Console.stdoutIsTTY ? nil : bar
        if self.bar == nil { bar.finish() }
        total = UInt64(lines)
    }

    /// Before line `i` (from 0): redraws every 4096 lines (the bar itself draws at most ten times a second).
    func line(_ i: Int) {
        if i & 4095 == 0 { bar?.update(ReplayProgress(phase: "output", done: UInt64(i), total: total)) }
    }

    /// After the listing is flushed: shows 100%, then clears the bar.
    func finish() {
        bar?.update(ReplayProgress(phase: "output", done: total, total: total))
        bar?.finish()
    }
}

/// The chart file could not be written: a failure of the run (exit 1), not of its arguments.
struct ChartWriteError: Error, CustomStringConvertible {
    var description: String
}

extension [UInt8] {
    /// Appends the UTF-8 of `s` (the listings build each line in the output buffer).
    mutating func add(_ s: String) { append(contentsOf: s.utf8) }
}
