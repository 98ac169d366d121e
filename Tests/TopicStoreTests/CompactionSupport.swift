import Compaction
import Foundation
import LMDB
import Replay
import SubscriptionLog
import TopicStore

/// Every file under `path` (relative name → bytes), LMDB's lock file left out:
/// it is the shared reader table, which every reader — `topicstore stats`,
/// an audit, a dry run — writes its slot into.
func fileContents(under path: String) -> [String: Data] {
    var out: [String: Data] = [:]
    let fm = FileManager.default
    guard let walker = fm.enumerator(atPath: path) else { return out }
    while let name = walker.nextObject() as? String {
        let full = (path as NSString).appendingPathComponent(name)
        var isDir: ObjCBool = false
        guard fm.fileExists(atPath: full, isDirectory: &isDir), !isDir.boolValue else { continue }
        if (name as NSString).lastPathComponent == "lock.mdb" { out[name] = Data(); continue }
        out[name] = fm.contents(atPath: full) ?? Data()
    }
    return out
}

/// Every log record of a store, in order.
func allRecords(_ store: TopicStore) throws -> [LogRecord] {
    let log = store.log
    var records: [LogRecord] = []
    try store.read { txn in try log.forEach(txn) { records.append($0); return true } }
    return records
}

/// Submits `count` events of the random replay workload, in batches.
func submitWorkload(_ store: TopicStore, count: Int, seed: UInt64) throws {
    var workload = ReplayWorkload(seed: seed)
    var events: [Event] = []
    for _ in 0..<count { events.append(workload.next(now: Int64(Date().timeIntervalSince1970 * 1000))) }
    var i = 0
    while i < events.count {
        let batch = Array(events[i..<min(i + 50, events.count)])
        for r in store.submitAndWait(batch) { _ = try? r.get() }
        i += batch.count
    }
}

/// A store in `dir/data` with `before` events of the random workload, then a
/// cut time (ms), then `after` more events: the store, still open, and the cut.
func storeWithCut(_ dir: TemporaryDirectory, before: Int, after: Int, seed: UInt64) throws -> (TopicStore, Int64) {
    let store = try TopicStore(directory: dir.sub("data"))
    try submitWorkload(store, count: before, seed: seed)
    usleep(20_000)
    let cut = nowMilliseconds()
    usleep(20_000)
    try submitWorkload(store, count: after, seed: seed &+ 1)
    return (store, cut)
}

/// Options that keep everything from `cut` on (ms): "now" is pinned one retention window later.
func compactionOptions(keepingFrom cut: Int64, archive: String? = nil) -> Compactor.Options {
    let retain = RetentionDuration(milliseconds: 86_400_000)
    var options = Compactor.Options(retain: retain)
    options.now = cut + retain.milliseconds - 1
    options.archiveDirectory = archive
    return options
}

func nowMilliseconds() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

/// Runs the `topicstore` executable; returns exit status and standard output.
@discardableResult
func compactCLI(_ arguments: [String]) throws -> (status: Int32, output: String, error: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: BuiltProducts.executable("topicstore"))
    process.arguments = arguments
    let out = Pipe(), err = Pipe()
    process.standardOutput = out
    process.standardError = err
    try process.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    let errData = err.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self), String(decoding: errData, as: UTF8.self))
}
