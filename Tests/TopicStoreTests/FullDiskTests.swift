import Foundation
import LMDB
import Testing
import TopicStore

/// A full disk is an error that names what could not be written, never a crash,
/// and leaves nothing behind that would make the directory look taken.
@Suite(.serialized, .enabled(if: SmallFilesystem.canMount, "mounting a tmpfs needs root and mount permission (CAP_SYS_ADMIN)"))
struct FullDiskTests: RunsTopicstore {
    /// The LMDB layer alone: no lock file left behind, a store refused likewise.
    @Test func openingAnEnvironmentOnAFullDiskIsAnError() throws {
        let fs = try SmallFilesystem(megabytes: 4)
        let dir = fs.sub("env")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        fs.fill()
        #expect(fs.available < 4096)
        do {
            _ = try Environment(path: dir)
            Issue.record("an environment opened on a full disk")
        } catch {
            #expect("\(error)".contains("No space left on device"), "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: dir + "/lock.mdb"), "a lock file was left behind")
        // A store, likewise.
        #expect(throws: (any Error).self) { _ = try TopicStore(directory: fs.sub("store")) }
    }

    /// A page file's pages are written on another thread: a write the full disk
    /// refuses there is thrown by the writer (at a later table or at `finish`),
    /// buffered or direct.
    @Test(arguments: [false, true]) func aPageFileOnAFullDiskIsAnError(bypassingPageCache: Bool) throws {
        let fs = try SmallFilesystem(megabytes: 2)
        let writer = try PageFileWriter(path: fs.sub("data.mdb"), bypassingPageCache: bypassingPageCache)
        do {
            writer.beginTable("big")
            let value = [UInt8](repeating: 7, count: 900)
            for i in 0..<20_000 as Range<UInt32> {
                try withUnsafeBytes(of: i.bigEndian) { k in try value.withUnsafeBytes { try writer.append(k, $0) } }
            }
            try writer.endTable()
            try writer.finish()
            Issue.record("18 MB written on a filesystem of 2")
        } catch {
            #expect("\(error)".contains("No space left on device"), "\(error)")
        }
    }

    static let command = #"{"project":"demo","type":"register","device_id":"D1","topics":["news"]}"#

    /// LMDB maps lock.mdb and writes its reader table through the map; made sparse on
    /// a full filesystem, that write was a SIGBUS (exit 135, and a lock.mdb without a
    /// data.mdb that made the next start refuse the directory).
    @Test func creatingAStoreOnAFullDiskFailsCleanly() throws {
        let fs = try SmallFilesystem(megabytes: 1)
        let filler = fs.fill()
        let store = fs.path + "/fresh"
        let load = try topicstore(["load", "--data", store, "-"], stdin: Self.command)
        #expect(load.status == 1, "status \(load.status): \(load.stderr)")
        #expect(load.stderr.contains("lock.mdb") && load.stderr.contains("No space left on device"), "\(load.stderr)")
        let left = (try? FileManager.default.contentsOfDirectory(atPath: store)) ?? []
        #expect(left.isEmpty, "left behind: \(left)")
        // Once there is room, the same directory takes the store.
        try FileManager.default.removeItem(atPath: filler)
        let again = try topicstore(["load", "--data", store, "-"], stdin: Self.command)
        #expect(again.status == 0, "\(again.stderr)")
    }

    static func installs(_ range: Range<Int>) -> [String] {
        range.flatMap { i in [
            #"{"project":"demo","type":"token","device_id":"D\#(i)","token":"tok\#(i)\#(String(repeating: "x", count: 120))","platform":"ios"}"#,
            #"{"project":"demo","type":"register","device_id":"D\#(i)","topics":["all",{"code":"user.\#(i)","single":true}]}"#] }
    }

    /// A load that fills the disk stops at the first commit that fails, says which lines
    /// were not applied and where to resume (not one error per remaining line), and the
    /// resumed load ends where a load on a roomy disk ends.
    @Test func aLoadThatFillsTheDiskStopsAndResumes() throws {
        let dir = TemporaryDirectory("full-load")
        let lines = Self.installs(0..<20_000)
        let fs = try SmallFilesystem(megabytes: 3)
        let store = fs.path + "/data"
        let load = try topicstore(["load", "--data", store, "-"], stdin: lines.joined(separator: "\n"))
        #expect(load.status == 1, "\(load.stderr)")
        #expect(load.stderr.contains("the store could not commit") && load.stderr.contains("full"), "\(load.stderr)")
        #expect(load.stderr.split(separator: "\n").count < 10, "\(load.stderr.prefix(2000))")
        let resume = try #require(load.stderr.firstMatch(of: /resume at line (\d+)/).flatMap { Int($0.1) }, "\(load.stderr)")
        #expect(resume > 1 && resume <= lines.count)
        // More room (an operator freeing space), and the rest.
        #expect(fs.resize(megabytes: 64))
        let rest = try topicstore(["load", "--data", store, "-"], stdin: lines[(resume - 1)...].joined(separator: "\n"))
        #expect(rest.status == 0, "\(rest.stderr)")
        let whole = try topicstore(["load", "--data", dir.sub("reference"), "-"], stdin: lines.joined(separator: "\n"))
        #expect(whole.status == 0)
        for args in [["audience", "--project", "demo", "--json", "all"], ["stats"]] {
            let a = try topicstore([args[0], "--data", store] + args.dropFirst())
            let b = try topicstore([args[0], "--data", dir.sub("reference")] + args.dropFirst())
            if args[0] == "stats" {
                #expect(a.stdout.contains("20000 devices, 20000 live tokens, 20001 topics"), "\(a.stdout)")
                #expect(b.stdout.contains("20000 devices, 20000 live tokens, 20001 topics"), "\(b.stdout)")
            } else {
                #expect(a.stdout == b.stdout, "\(a.stdout) vs \(b.stdout)")
            }
        }
        let audit = try topicstore(["audit", "--data", store])
        #expect(audit.status == 0, "\(audit.stdout)\(audit.stderr)")
    }

    /// An import folds on a second thread (`ImportApplier`): a commit that fills the disk there
    /// stops the import naming the full filesystem, leaves the directory as it was, and the
    /// same import on a roomier disk ends at the source's head. A replay likewise.
    @Test func anImportOrAReplayThatFillsTheDiskSaysSoAndLeavesNothing() throws {
        let dir = TemporaryDirectory("full-import")
        let source = dir.sub("source")
        let load = try topicstore(["load", "--data", source, "-"], stdin: Self.installs(0..<20_000).joined(separator: "\n"))
        #expect(load.status == 0, "\(load.stderr)")
        let export = try topicstore(["export", "--data", source])
        #expect(export.status == 0, "\(export.stderr)")
        let file = dir.sub("export.jsonl")
        try export.stdout.write(toFile: file, atomically: false, encoding: .utf8)
        let fs = try SmallFilesystem(megabytes: 3)
        let target = fs.path + "/imported"
        let failed = try topicstore(["import", "--data", target, file])
        #expect(failed.status == 1, "status \(failed.status): \(failed.stderr)")
        #expect(failed.stderr.contains("the filesystem holding \(target) is full"), "\(failed.stderr)")
        let left = (try? FileManager.default.contentsOfDirectory(atPath: target)) ?? []
        #expect(left.isEmpty, "left behind: \(left)")
        #expect(fs.resize(megabytes: 64))
        let head = try #require(try topicstore(["audit", "--data", source]).stdout.firstMatch(of: /head: seq (\d+) sha256 ([0-9a-f]{64})/))
        let again = try topicstore(["import", "--data", target, "--expect-head", "\(head.1):\(head.2)", file])
        #expect(again.status == 0 && again.stdout.contains("imported 40000 records"), "\(again.stdout)\(again.stderr)")
        // A replay onto a full disk, likewise: it said only "Input/output error (5)" (how LMDB
        // reports a write the filesystem cut short).
        let small = try SmallFilesystem(megabytes: 3)
        let out = small.path + "/as-of"
        let replay = try topicstore(["replay", "--data", source, "--to-seq", "30000", "--out", out])
        #expect(replay.status == 1 && replay.stderr.contains("the filesystem holding \(out) is full"), "status \(replay.status): \(replay.stderr)")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: out)) ?? []).isEmpty, "a failed replay left files behind")
    }

    /// A server whose disk is full answers 503 with Retry-After (not 500), says so on
    /// /healthz, and recovers by itself once there is room.
    @Test func aServerOnAFullDiskSaysSoAndRecovers() throws {
        let fs = try SmallFilesystem(megabytes: 2)
        let serve = try ServeProcess(data: fs.path + "/data")
        let key = try #require(serve.clientKey)
        let client = try RawHTTPClient(port: serve.port)
        var refused: RawResponse?
        for i in 0..<50_000 {
            let r = try client.request("POST", "/api/register", headers: [("X-MPush-Token", key), ("Content-Type", "application/json")],
                                       text: #"{"device_id":"D\#(i)","topics":["all",{"code":"user.\#(i)","single":true}]}"#)
            if r.status != 200 { refused = r; break }
        }
        let full = try #require(refused, "the disk never filled")
        #expect(full.status == 503 && full.header("Retry-After") == "10", "\(full.status) \(full.text)")
        #expect(full.text.contains("disk is full"), "\(full.text)")
        let health = try RawHTTPClient(port: serve.port).request("GET", "/healthz")
        #expect(health.status == 503 && health.text.contains("\"status\":\"failing\""), "\(health.status) \(health.text)")
        // /metrics counts the failed commits too (an operator review found it had nothing to alert on).
        let metrics = try RawHTTPClient(port: serve.port).request("GET", "/metrics").text
        let failures = metrics.split(separator: "\n").first { $0.hasPrefix("topicstore_commit_failures_total ") }
        #expect(failures.flatMap { Int($0.split(separator: " ")[1]) }.map { $0 >= 1 } == true, "\(failures ?? "none")")
        #expect(fs.resize(megabytes: 64))
        let again = try RawHTTPClient(port: serve.port).request("POST", "/api/register", headers: [("X-MPush-Token", key), ("Content-Type", "application/json")],
                                                               text: #"{"device_id":"after","topics":["all"]}"#)
        #expect(again.status == 200, "\(again.text)")
        let healthy = try RawHTTPClient(port: serve.port).request("GET", "/healthz")
        #expect(healthy.status == 200 && healthy.text.contains("\"status\":\"ok\""), "\(healthy.text)")
    }

    /// A read command (audit's scratch store, replay --out) on a full disk: the same.
    @Test func aReplayIntoAFullDiskFailsCleanly() throws {
        let dir = TemporaryDirectory("full-replay")
        let data = try loadedStore(dir, Self.command)
        let fs = try SmallFilesystem(megabytes: 1)
        fs.fill()
        let replay = try topicstore(["replay", "--data", data, "--to-seq", "1", "--out", fs.path + "/out"])
        #expect(replay.status == 1, "status \(replay.status): \(replay.stderr)")
        #expect(replay.stderr.contains("No space left on device"), "\(replay.stderr)")
    }
}
