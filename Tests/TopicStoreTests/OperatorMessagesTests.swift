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

    // MARK: 2, 3. credentials: a project that exists, readable files, Apple's 10-character ids

    func keys(_ dir: TemporaryDirectory) throws -> (p8: String, serviceAccount: String) {
        try SendCommandLineTests().makeKeys(dir)
    }

    func credentialRows(_ data: String) throws -> [[String: Any]] {
        let list = try topicstore(["credentials", "list", "--json", "--data", data])
        return (try? JSONSerialization.jsonObject(with: Data(list.stdout.utf8))) as? [[String: Any]] ?? []
    }

    @Test func credentialsRefuseAnUnknownProjectAsKeysDo() throws {
        let dir = TemporaryDirectory("cred-project")
        let (p8, serviceAccount) = try keys(dir)
        let data = try smallStore(dir)
        let key = try topicstore(["key", "add", "--project", "nope", "--kind", "server", "--data", data])
        #expect(key.status == 5)
        for args in [["--fcm-service-account", serviceAccount],
                     ["--apns-key-file", p8, "--key-id", "ABC123DEFG", "--team-id", "TEAM123456", "--bundle-id", "com.example.app", "--sandbox"]] {
            let r = try topicstore(["credentials", "set", "--project", "nope", "--data", data] + args)
            #expect(r.status == 5, "\(args): \(r.stdout) \(r.stderr)")
            #expect(r.stderr.contains("no project 'nope' (create it with: topicstore project add nope)"), "\(r.stderr)")
        }
        #expect(try credentialRows(data).isEmpty)
        #expect(try topicstore(["project", "add", "nope", "--data", data]).status == 0)
        let r = try topicstore(["credentials", "set", "--project", "nope", "--fcm-service-account", serviceAccount, "--data", data])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try credentialRows(data).count == 1)
    }

    @Test func credentialsSayPlainlyWhatIsWrong() throws {
        let dir = TemporaryDirectory("cred-nits")
        let (p8, _) = try keys(dir)
        let data = try smallStore(dir)
        #expect(try topicstore(["project", "add", "demo", "--data", data]).status == 0)
        func apns(_ file: String, keyID: String = "ABC123DEFG", teamID: String = "TEAM123456") throws -> Run {
            try topicstore(["credentials", "set", "--project", "demo", "--apns-key-file", file, "--key-id", keyID, "--team-id", teamID,
                            "--bundle-id", "com.example.app", "--production", "--data", data])
        }
        let missing = try apns(dir.sub("AuthKey_MISSING.p8"))
        #expect(missing.status == 2, "\(missing.stderr)")
        #expect(missing.stderr == "topicstore: cannot read \(dir.sub("AuthKey_MISSING.p8")): no such file\n", "\(missing.stderr)")
        let directory = try apns(dir.path)
        #expect(directory.status == 2 && directory.stderr.contains("cannot read \(dir.path): it is a directory"), "\(directory.stderr)")
        let missingAccount = try topicstore(["credentials", "set", "--project", "demo", "--fcm-service-account", dir.sub("sa-missing.json"), "--data", data])
        #expect(missingAccount.status == 2 && missingAccount.stderr.contains("cannot read \(dir.sub("sa-missing.json")): no such file"), "\(missingAccount.stderr)")
        for (keyID, teamID, option) in [("ABC", "TEAM123456", "key-id"), ("ABC123DEFGH", "TEAM123456", "key-id"), ("ABC123DEF-", "TEAM123456", "key-id"),
                                         ("ABC123DEFG", "TEAM", "team-id")] {
            let r = try apns(p8, keyID: keyID, teamID: teamID)
            #expect(r.status == 2, "\(keyID) \(teamID): \(r.stderr)")
            #expect(r.stderr.contains("--\(option) must be the 10-character"), "\(r.stderr)")
        }
        for r in [missing, directory, missingAccount] { #expect(!r.stderr.contains("NSCocoaErrorDomain")) }
        #expect(try credentialRows(data).isEmpty)
        #expect(try apns(p8).status == 0)
    }
}
