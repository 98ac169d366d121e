import Foundation
import LMDB
import Testing
import TopicStore

/// LMDB on a full filesystem: an error, never a crash. LMDB writes a new lock
/// file's header through a shared map; on a full disk that was SIGBUS.
@Suite(.serialized) struct FullDiskTests {
    @Test(.enabled(if: SmallFilesystem.canMount, "mounting a tmpfs needs root and mount permission (CAP_SYS_ADMIN)"))
    func openingAnEnvironmentOnAFullDiskIsAnError() throws {
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
}
