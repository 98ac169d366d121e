import EventJSON
import Foundation
import LMDB
import Replay
import SubscriptionLog
import TopicStore

/// Cold history: the events a compaction removes from the log, as zstd-compressed
/// JSON Lines in the schema `topicstore export` writes (`load`'s plus `seq` and
/// `ts`), one file per compaction named by its sequence range:
/// `log-<from>-<to>.jsonl.zst`. Archives concatenate (zstd frames do), so
/// `cat log-1-*.zst log-…zst | topicstore import -` rebuilds a store from sequence 1.
public enum Archive {
    public static func fileName(from: UInt64, to: UInt64) -> String { "log-\(from)-\(to).jsonl.zst" }

    /// Parses `log-<from>-<to>.jsonl.zst`.
    public static func range(ofFileName name: String) -> ClosedRange<UInt64>? {
        guard name.hasPrefix("log-"), name.hasSuffix(".jsonl.zst") else { return nil }
        let middle = name.dropFirst(4).dropLast(10).split(separator: "-")
        guard middle.count == 2, let a = UInt64(middle[0]), let b = UInt64(middle[1]), a <= b else { return nil }
        return a...b
    }

    public struct Summary: Sendable {
        public var path: String
        public var from: UInt64
        public var to: UInt64
        public var records: UInt64
        public var jsonBytes: Int
        public var compressedBytes: Int
        public var seconds: Double
    }

    public enum Failure: Error, CustomStringConvertible {
        case verification(String, String)
        public var description: String {
            switch self {
            case .verification(let path, let why): return "the archive \(path) does not match the log: \(why)"
            }
        }
    }

    /// Writes records `from...to` of `store`'s log into `directory` under a
    /// temporary name, syncs it, reads it back and verifies it against the log
    /// (see `verify`), and only then gives it its final name. Returns where it is.
    public static func write(from store: TopicStore, from: UInt64, to: UInt64, into directory: String,
                             chainBefore: ChainHash, level: Int32 = 3,
                             progress: ((ReplayProgress) -> Void)? = nil) throws -> Summary {
        let started = Date()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let final = (directory as NSString).appendingPathComponent(fileName(from: from, to: to))
        let tmp = (directory as NSString).appendingPathComponent(".\(fileName(from: from, to: to)).tmp-\(getpid())")
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw ReplayError.io("cannot create \(tmp): \(String(cString: strerror(errno)))") }
        var closed = false
        defer { if !closed { close(fd) } }
        do {
            let zstd = try ZstdCompressor(fd: fd, level: level, workers: 1)
            let newline: [UInt8] = [0x0A]
            var records: UInt64 = 0
            let summary = try Export.lineBytes(from: store, from: from, through: to, progress: progress) { line in
                try zstd.write(line)
                try zstd.write(newline)
                records += 1
            }
            try zstd.finish()
            guard summary.firstSequence == from, summary.lastSequence == to, records == to - from + 1 else {
                throw Failure.verification(tmp, "the log gave records \(summary.firstSequence ?? 0)…\(summary.lastSequence ?? 0), not \(from)…\(to)")
            }
            guard fsync(fd) == 0 else { throw ReplayError.io("fsync \(tmp): \(String(cString: strerror(errno)))") }
            close(fd); closed = true
            try verify(archive: tmp, against: store, from: from, to: to, chainBefore: chainBefore, progress: progress)
            guard rename(tmp, final) == 0 else { throw ReplayError.io("cannot rename \(tmp): \(String(cString: strerror(errno)))") }
            try Durable.syncDirectory(directory)
            return Summary(path: final, from: from, to: to, records: records, jsonBytes: zstd.bytesIn,
                           compressedBytes: zstd.bytesOut, seconds: Date().timeIntervalSince(started))
        } catch {
            if !closed { close(fd); closed = true }
            unlink(tmp)
            throw error
        }
    }

    /// Reads the archive back and checks it against the log: one line per
    /// record, sequences `from...to` in order with none missing or extra, and
    /// every record re-encoded from its line, chained from `chainBefore` (the
    /// link before `from`), equal to the log's record — byte for byte, or, where
    /// the log stores a name in another form, the same event under the same
    /// chain link — so the archive holds the events whole and carries the log's links.
    ///
    /// The lines are decompressed and parsed on a second thread, `linesPerChunk`
    /// at a time, while this one re-encodes and compares the records before them.
    public static func verify(archive path: String, against store: TopicStore, from: UInt64, to: UInt64,
                              chainBefore: ChainHash, linesPerChunk: Int = 50_000,
                              progress: ((ReplayProgress) -> Void)? = nil) throws {
        let lines = try ParsedArchiveLines(path: path, count: to >= from ? to - from + 1 : 0, chunkSize: linesPerChunk)
        defer { lines.cancel() }
        var link = chainBefore
        var next = from
        let log = store.log
        let batch: UInt64 = 50_000
        var lineNumber = 0
        while next <= to {
            let end = min(to, next + batch - 1)
            var stored: [[UInt8]] = []
            stored.reserveCapacity(Int(end - next + 1))
            try store.read { txn in
                try log.forEachEncoded(from: next, through: end, txn) { seq, bytes in
                    guard seq == next + UInt64(stored.count) else {
                        throw Failure.verification(path, "the log has no record \(next + UInt64(stored.count))")
                    }
                    stored.append(Array(bytes))
                    return true
                }
            }
            guard stored.count == Int(end - next + 1) else {
                throw Failure.verification(path, "the log ends before \(end)")
            }
            for (i, bytes) in stored.enumerated() {
                let seq = next + UInt64(i)
                guard let record = try lines.next() else {
                    throw Failure.verification(path, "it ends after \(lineNumber) lines; record \(seq) is missing")
                }
                lineNumber += 1
                guard record.sequence == seq else {
                    throw Failure.verification(path, "line \(lineNumber) holds seq \(record.sequence), expected \(seq)")
                }
                // In the version the log holds it in (a version 2 record stays one until compaction drops it).
                // Its names may be stored in other forms than the ones chosen now (a token written as
                // text before the 6-bit form): the line must give the same event and the same link.
                let version = bytes.first.map { RecordCodec.chainedVersions.contains($0) ? $0 : RecordCodec.currentVersion } ?? RecordCodec.currentVersion
                let encoded = try RecordCodec.encode(record, chainingFrom: &link, version: version)
                let same = try encoded == bytes || bytes.withUnsafeBytes { b in
                    try RecordCodec.decode(b, key: seq) == record && RecordCodec.storedLinkPart(of: b, key: seq).matches(link)
                }
                guard same else {
                    throw Failure.verification(path, "line \(lineNumber) (seq \(seq)) does not re-encode to the log's record (its chain link would differ)")
                }
            }
            progress?(ReplayProgress(phase: "verify", done: end - from + 1, total: to - from + 1))
            next = end + 1
        }
        if let extra = try lines.lineAfterTheLast() {
            throw Failure.verification(path, "it holds more than \(to - from + 1) records (next line: \(extra.prefix(80)))")
        }
    }

    /// Reads an archive (or any JSON Lines file, compressed or not) as records:
    /// the same events `export` wrote.
    public static func records(at path: String) throws -> [LogRecord] {
        let lines = try ArchiveLines(path: path)
        var out: [LogRecord] = []
        var n = 0
        while let line = try lines.next() {
            n += 1
            if line.allSatisfy({ $0 == " " || $0 == "\t" }) { continue }
            out.append(try Importer.record(fromLine: line, lineNumber: n))
        }
        return out
    }
}

/// Lines of a file that may be zstd-compressed.
final class ArchiveLines {
    private let input: MaybeCompressedInput
    private var buffer: [UInt8] = []
    private var start = 0
    private var eof = false

    init(path: String) throws { input = try MaybeCompressedInput(path: path) }

    func next() throws -> String? {
        while true {
            if let nl = buffer[start...].firstIndex(of: 0x0A) {
                let line = String(decoding: buffer[start..<nl], as: UTF8.self)
                start = nl + 1
                return line
            }
            if eof {
                guard start < buffer.count else { return nil }
                let line = String(decoding: buffer[start...], as: UTF8.self)
                start = buffer.count
                return line
            }
            if start > 0 { buffer.removeFirst(start); start = 0 }
            if try !input.read(into: &buffer) { eof = true }
        }
    }
}
