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
