import Foundation

/// Serialises the creation of a store between processes: an advisory lock
/// (`flock`) on a hidden file, `.creating`, in the store directory. The process
/// that creates the store holds it exclusively from its first file to its last
/// table, then removes it; a process that finds the directory half made (a
/// lock.mdb and no data.mdb yet, a data.mdb without its tables) while the file is
/// there waits for it shared and looks again, rather than calling the store
/// something it is not. Opening an existing store takes no lock.
///
/// Not the directory itself: compaction holds that one (`DirectoryLock`) for its
/// whole run, and a compaction's own open must not wait for it.
enum CreationLock {
    static let fileName = ".creating"

    /// Runs `body` (the creation) holding the lock exclusively.
    static func creating<R>(in directory: String, _ body: () throws -> R) throws -> R {
        let path = directory + "/" + fileName
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        // A file that cannot be made cannot be locked: create as before the lock.
        guard fd >= 0 else { return try body() }
        defer { close(fd) }
        guard lock(fd, LOCK_EX) else { return try body() }
        // Removed while held: whoever waits on it looks again and finds the store made
        // (or, after a creation that failed, makes it, with no one else left waiting).
        defer { unlink(path); flock(fd, LOCK_UN) }
        return try body()
    }

    /// Waits until no process is creating a store in `directory`; false when none was.
    static func waitForCreation(in directory: String) -> Bool {
        let fd = open(directory + "/" + fileName, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return lock(fd, LOCK_SH)
    }

    private static func lock(_ fd: Int32, _ operation: Int32) -> Bool {
        while flock(fd, operation) != 0 {
            guard errno == EINTR else { return false }
        }
        return true
    }
}
