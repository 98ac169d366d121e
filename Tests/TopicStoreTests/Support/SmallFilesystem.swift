import Foundation

/// A small filesystem of its own (tmpfs), mounted for one test and unmounted
/// after it. Needs root and permission to mount (a container may not give it):
/// the tests that use it are skipped, saying why, where it cannot be mounted.
final class SmallFilesystem: @unchecked Sendable {
    let path: String
    private var mounted = false

    init(megabytes: Int) throws {
        path = NSTemporaryDirectory() + "tmpfs-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        guard mount("tmpfs", path, "tmpfs", 0, "size=\(megabytes)m,mode=0755") == 0 else {
            let why = String(cString: strerror(errno))
            rmdir(path)
            throw CocoaError(.fileWriteUnknown, userInfo: [NSLocalizedDescriptionKey: "mount tmpfs: \(why)"])
        }
        mounted = true
    }

    func sub(_ name: String) -> String { path + "/" + name }

    /// Writes a file of zeros until the filesystem is full; returns its path.
    @discardableResult
    func fill() -> String {
        let filler = sub(".filler-\(UUID().uuidString.prefix(8))")
        let fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        let chunk = [UInt8](repeating: 0, count: 1 << 20)
        if fd >= 0 {
            var size = chunk.count
            while size >= 512 {
                let n = chunk.withUnsafeBytes { write(fd, $0.baseAddress, size) }
                if n <= 0 { size /= 2 }
            }
            close(fd)
        }
        return filler
    }

    /// Gives the filesystem a new size (an operator freeing space); true when it worked.
    @discardableResult
    func resize(megabytes: Int) -> Bool {
        mount("tmpfs", path, "tmpfs", UInt(MS_REMOUNT), "size=\(megabytes)m,mode=0755") == 0
    }

    var available: Int {
        var s = statvfs()
        return statvfs(path, &s) == 0 ? Int(s.f_bavail) * Int(s.f_frsize) : 0
    }

    deinit {
        if mounted { umount2(path, Int32(MNT_DETACH)) }
        rmdir(path)
    }

    /// Whether a tmpfs can be mounted here (tried once).
    static let canMount: Bool = {
        guard geteuid() == 0 else { return false }
        return (try? SmallFilesystem(megabytes: 1)) != nil
    }()
}
