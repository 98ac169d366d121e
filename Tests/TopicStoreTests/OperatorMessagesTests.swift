import Foundation
import LMDB
import Testing

/// What an operator reads when something goes wrong: the message names the
/// file and the setting, in plain words, with the documented exit status.
@Suite struct OperatorMessagesTests: RunsTopicstore {
    static let commands = """
    {"project":"demo","type":"token","device_id":"D1","token":"aaaa1111","platform":"ios"}
    {"project":"demo","type":"register","device_id":"D1","topics":["news","all"]}
    """

    func smallStore(_ dir: TemporaryDirectory) throws -> String {
        let load = try topicstore(["load", "--data", dir.sub("data"), "-"], stdin: Self.commands)
        #expect(load.status == 0, "\(load.stderr)")
        return dir.sub("data")
    }

    // MARK: 1. a store that cannot be opened names the file and the directory

    /// The tests run as root, whom permissions do not stop: a path under a
    /// regular file fails the same open with ENOTDIR.
    @Test func environmentOpenErrorNamesTheFile() throws {
        let dir = TemporaryDirectory("open-err")
        FileManager.default.createFile(atPath: dir.sub("file"), contents: Data("x".utf8))
        let path = dir.sub("file") + "/store"
        do {
            _ = try Environment(path: path)
            Issue.record("opened an environment under a regular file")
        } catch let error as EnvironmentOpenError {
            #expect(error.description == "cannot open \(path)/lock.mdb: Not a directory", "\(error)")
            #expect(error.file == "lock.mdb")
        }
        // The code is still matched as before (`catch LMDBError.x`).
        var matched = false
        do { _ = try Environment(path: path) } catch LMDBError(rawValue: ENOTDIR) { matched = true }
        #expect(matched)
    }

    @Test func commandsNameTheStoreFileTheyCannotOpen() throws {
        let dir = TemporaryDirectory("open-cli")
        let data = try smallStore(dir)
        try FileManager.default.removeItem(atPath: data + "/lock.mdb")
        try FileManager.default.createDirectory(atPath: data + "/lock.mdb", withIntermediateDirectories: false)
        for args in [["stats", "--data", data], ["audit", "--data", data], ["export", "--data", data],
                     ["topics", "--data", data, "--project", "demo"], ["load", "--data", data, "-"]] {
            let r = try topicstore(args, stdin: "")
            #expect(r.status == 1, "\(args): \(r.stderr)")
            #expect(r.stderr.contains("cannot open \(data)/lock.mdb: Is a directory"), "\(args): \(r.stderr)")
        }
    }
}
