import Foundation
import Replay
import SubscriptionLog
import TopicStore

/// `topicstore import`: an export loaded exactly into a new store.
enum ImportCommand: Command {
    static let spec = CommandSpec(
        name: "import",
        summary: "rebuild a store from an export, keeping sequences and times (same chain head and projections)",
        usage: "import [--data DIR] [--expect-head SEQ:HEX] [--memory-budget MIB] FILE|-",
        options: [
            .init(name: "expect-head", value: "SEQ:HEX", help: "fail unless the imported log ends at this head (for a head inside it, "
                  + "import without this and run topicstore audit --data DIR --expect-head SEQ:HEX)"),
            .init(name: "memory-budget", value: "MIB", help: "memory the build may hold before it is written in rounds (default a third of RAM, at most 8192; 0: write through every batch)"),
        ],
        details: """
        DIR must be new or empty. Lines must come from `topicstore export` from sequence 1,
        gap-free, times never going back. zstd-compressed exports and archives (*.jsonl.zst)
        are decompressed as they stream. The first bad line stops the import (exit 5) and
        nothing is left in DIR (a partial store would audit clean, as of its last line,
        and refuse the next import); so does a head that differs from --expect-head (exit 4).
        Give the archives of a compacted store in order (log-1-…, then each next FROM):
        a shell glob sorts log-200000-… before log-31-…. For plain commands use `topicstore load`.
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        guard arguments.positionals.count == 1 else { throw UsageError(description: "import takes one FILE (or - for standard input)") }
        var expected: ChainHead?
        if let text = arguments.value("expect-head") {
            guard let h = ChainHead(parsing: text) else { throw UsageError(description: "--expect-head must be SEQ:HEX (64 hex digits)") }
            expected = h
        }
        let reader = try LineReader(path: arguments.positionals[0])
        let started = Date()
        let directory = arguments.dataDirectory
        let output = OutputDirectory(directory)
        let importer = try Importer(creating: directory, memoryBudget: ReplayCommand.memoryBudget(arguments))
        /// Removes what the import wrote (its environment closed first), so no partial store is left.
        func discard() {
            _ = try? importer.finish()
            output.discardWritten()
        }
        var lineNumber = 0
        let bar = ProgressBar(arguments: arguments)
        defer { bar.finish() }
        do {
            while let line = reader.next() {
                lineNumber += 1
                if lineNumber % 4096 == 0, let at = reader.position { bar.update(ReplayProgress(phase: "import", done: at.read, total: at.size)) }
                if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { continue }
                let (record, link, unchained) = try Importer.parse(line: String(decoding: line, as: UTF8.self), lineNumber: lineNumber)
                try importer.add(record, link: link, unchained: unchained, lineNumber: lineNumber)
            }
            if let failure = reader.failure {
                bar.finish()
                discard()
                Console.printError("after line \(lineNumber): \(failure) (nothing imported: \(directory) is left as it was)")
                return .invalidInput
            }
        } catch let error as ReplayError {
            bar.finish()
            discard()
            switch error {
            case .invalidLine, .checkpointMismatch: Console.printError(error.description + " (nothing imported: \(directory) is left as it was)")
            default: Console.printError("line \(lineNumber): \(error) (nothing imported: \(directory) is left as it was)")
            }
            // A line that does not match the export's chain is tampering or damage, as audit reports it.
            if case .checkpointMismatch = error { return .verificationFailed }
            return .invalidInput
        } catch {
            bar.finish()
            discard()
            throw error
        }
        let head: ChainHead?
        do { head = try importer.finish() } catch { discard(); throw error }
        bar.finish()
        let seconds = Date().timeIntervalSince(started)
        let matches = expected == nil || expected == head
        // What was imported is not the log that was expected: it is removed, as after a bad
        // line. Left, it audited clean and offered its own head for anchoring (an auditor's review).
        if !matches { output.discardWritten() }
        if arguments.json {
            var object: [String: Any] = ["records": importer.records, "seconds": seconds, "headMatches": matches]
            if let head { object["head"] = ["seq": head.sequence, "hash": head.hash.hex] }
            Console.printJSON(object)
        } else {
            print(String(format: "imported %llu records in %.2f s", importer.records, seconds)
                  + (head.map { "; head seq \($0.sequence) sha256 \($0.hash.hex)" } ?? ""))
            if !matches {
                print("the head differs from --expect-head \(expected!): the lines are not that log "
                      + "(nothing imported: \(directory) is left as it was)")
            }
        }
        return matches ? .success : .verificationFailed
    }
}
