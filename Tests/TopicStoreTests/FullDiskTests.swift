import Foundation
import Testing

/// A small tmpfs mounted for one test (root only; where mounting is not permitted
/// the tests that need one are skipped, saying why).
final class SmallFilesystem {
    let path: String

    /// Whether this process may mount a tmpfs (tried once).
    static let available: Bool = {
        guard geteuid() == 0 else { return false }
        let probe = TemporaryDirectory("mount-probe")
        guard SmallFilesystem.run("/bin/mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", probe.path]) == 0 else { return false }
        _ = SmallFilesystem.run("/bin/umount", [probe.path])
        return true
    }()

    init(_ dir: TemporaryDirectory, kilobytes: Int) throws {
        path = dir.sub("fs")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        guard Self.run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(kilobytes)k", "tmpfs", path]) == 0 else {
            throw CocoaError(.fileWriteUnknown)
        }
    }

    /// Fills the filesystem with one file; returns its path (remove it to free the space).
    func fill() -> String {
        let filler = path + "/filler"
        let fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        let block = [UInt8](repeating: 0xAB, count: 4096)
        while block.withUnsafeBytes({ write(fd, $0.baseAddress, 4096) }) > 0 {}
        close(fd)
        return filler
    }

    deinit { _ = Self.run("/bin/umount", ["-l", path]) }

    @discardableResult
    static func run(_ tool: String, _ arguments: [String]) -> Int32 {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: tool)
        p.arguments = arguments
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        guard (try? p.run()) != nil else { return -1 }
        p.waitUntilExit()
        return p.terminationStatus
    }
}

/// A full disk is an error that names what could not be written, never a crash,
/// and leaves nothing behind that would make the directory look taken.
@Suite(.enabled(if: SmallFilesystem.available, "needs root to mount a small tmpfs"))
struct FullDiskTests: RunsTopicstore {
    static let command = #"{"project":"demo","type":"register","device_id":"D1","topics":["news"]}"#

    /// LMDB maps lock.mdb and writes its reader table through the map; made sparse on
    /// a full filesystem, that write was a SIGBUS (exit 135, and a lock.mdb without a
    /// data.mdb that made the next start refuse the directory).
    @Test func creatingAStoreOnAFullDiskFailsCleanly() throws {
        let dir = TemporaryDirectory("full-create")
        let fs = try SmallFilesystem(dir, kilobytes: 512)
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
        let fs = try SmallFilesystem(dir, kilobytes: 3 * 1024)
        let store = fs.path + "/data"
        let load = try topicstore(["load", "--data", store, "-"], stdin: lines.joined(separator: "\n"))
        #expect(load.status == 1, "\(load.stderr)")
        #expect(load.stderr.contains("the store could not commit") && load.stderr.contains("full"), "\(load.stderr)")
        #expect(load.stderr.split(separator: "\n").count < 10, "\(load.stderr.prefix(2000))")
        let resume = try #require(load.stderr.firstMatch(of: /resume at line (\d+)/).flatMap { Int($0.1) }, "\(load.stderr)")
        #expect(resume > 1 && resume <= lines.count)
        // More room (an operator freeing space), and the rest.
        #expect(SmallFilesystem.run("/bin/mount", ["-o", "remount,size=64m", fs.path]) == 0)
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

    /// A server whose disk is full answers 503 with Retry-After (not 500), says so on
    /// /healthz, and recovers by itself once there is room.
    @Test func aServerOnAFullDiskSaysSoAndRecovers() throws {
        let dir = TemporaryDirectory("full-serve")
        let fs = try SmallFilesystem(dir, kilobytes: 2 * 1024)
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
        #expect(SmallFilesystem.run("/bin/mount", ["-o", "remount,size=64m", fs.path]) == 0)
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
        let fs = try SmallFilesystem(dir, kilobytes: 512)
        _ = fs.fill()
        let replay = try topicstore(["replay", "--data", data, "--to-seq", "1", "--out", fs.path + "/out"])
        #expect(replay.status == 1, "status \(replay.status): \(replay.stderr)")
        #expect(replay.stderr.contains("No space left on device"), "\(replay.stderr)")
    }
}
