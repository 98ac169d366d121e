import Foundation
import LMDB
import MPushAPI
import Notifications
import Testing
import TopicStore

/// What an operator reads when something goes wrong: the message names the
/// file and the setting, in plain words, with the documented exit status.
@Suite struct OperatorMessagesTests: RunsTopicstore {
    static let commands = """
    {"project":"demo","type":"token","device_id":"D1","token":"aaaa1111","platform":"ios"}
    {"project":"demo","type":"register","device_id":"D1","topics":["news","all"]}
    """

    // MARK: 1. a store that cannot be opened names the file and the directory

    /// The tests run as root, whom permissions do not stop: a path under a
    /// regular file fails the same open with ENOTDIR.
    @Test func environmentOpenErrorNamesTheFile() throws {
        let dir = TemporaryDirectory("open-err")
        _ = FileManager.default.createFile(atPath: dir.sub("file"), contents: Data("x".utf8))
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
        let data = try loadedStore(dir, Self.commands)
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
        let data = try loadedStore(dir, Self.commands)
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
        let data = try loadedStore(dir, Self.commands)
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

    // MARK: 4. config files: whole numbers said as whole numbers, ranges as the docs give them

    func configError(_ json: String) throws -> String? {
        let dir = TemporaryDirectory("cfg")
        try Data(json.utf8).write(to: URL(fileURLWithPath: dir.sub("c.json")))
        var configuration = ServerConfiguration()
        do { try configuration.load(file: dir.sub("c.json")) } catch { return "\(error)".replacingOccurrences(of: "config file \(dir.sub("c.json")): ", with: "") }
        return nil
    }

    @Test(arguments: [
        (#"{"bodyLimitBytes": 0}"#, "'bodyLimitBytes' must be a whole number from 1 to 2147483647, not 0"),
        (#"{"audiencePageLimit": 2.5}"#, "'audiencePageLimit' must be a whole number from 1 to 2147483647, not 2.5"),
        (#"{"shutdownTimeoutSeconds": -1}"#, "'shutdownTimeoutSeconds' must be 0 to 86400 seconds, not -1"),
        (#"{"keyCacheSeconds": 5}"#, "'keyCacheSeconds' must be 0 to 1 seconds, not 5"),
        (#"{"keyCacheSeconds": 1.5}"#, "'keyCacheSeconds' must be 0 to 1 seconds, not 1.5"),
        (#"{"rateLimit": {"server": {"perSecond": 5, "burst": 0}}}"#, "rateLimit.server.burst must be from 1 to 1000000000, not 0"),
        (#"{"delivery": {"batchSize": 0}}"#, "delivery.batchSize must be a whole number from 1 to 1000000, not 0"),
        (#"{"delivery": {"batchSize": 2.5}}"#, "delivery.batchSize must be a whole number from 1 to 1000000, not 2.5"),
        (#"{"delivery": {"batchSize": "many"}}"#, "delivery.batchSize must be a whole number from 1 to 1000000"),
        (#"{"delivery": {"maxInFlight": 100001}}"#, "delivery.maxInFlight must be a whole number from 1 to 100000, not 100001"),
        (#"{"delivery": {"connectionsPerHost": 65}}"#, "delivery.connectionsPerHost must be a whole number from 1 to 64, not 65"),
        (#"{"delivery": {"maxAttempts": 0}}"#, "delivery.maxAttempts must be a whole number from 1 to 20, not 0"),
        (#"{"delivery": {"retryBaseSeconds": 61}}"#, "delivery.retryBaseSeconds must be from 0 to 60 seconds, not 61"),
        (#"{"delivery": {"retryMaxSeconds": -0.5}}"#, "delivery.retryMaxSeconds must be from 0 to 3600 seconds, not -0.5"),
        (#"{"delivery": {"requestTimeoutSeconds": 0}}"#, "delivery.requestTimeoutSeconds must be from 1 to 600 seconds, not 0"),
    ])
    func configMessagesSayNumbersAsWritten(config: String, message: String) throws {
        #expect(try configError(config) == message)
    }

    /// An operator review got "is not a JSON object" for every syntax error, and
    /// "NSCocoaErrorDomain error 256" for a directory.
    @Test func configFilesThatCannotBeReadSayWhy() throws {
        let bad = try #require(try configError(#"{"threads": 2, "listen": }"#))
        #expect(bad.contains("is not valid JSON") && bad.contains("character 25"), "\(bad)")
        #expect(try configError("[1]")?.contains("is not a JSON object") == true)
        let dir = TemporaryDirectory("cfg-dir")
        var configuration = ServerConfiguration()
        for (path, why) in [(dir.path, "it is a directory"), (dir.sub("none.json"), "it does not exist")] {
            do { try configuration.load(file: path); Issue.record("\(path) loaded") } catch {
                #expect("\(error)" == "cannot read config file \(path): \(why)")
            }
        }
    }

    @Test func configRangesAreInclusiveAsDocumented() throws {
        for ok in [#"{"keyCacheSeconds": 1}"#, #"{"keyCacheSeconds": 0}"#, #"{"bodyLimitBytes": 2147483647}"#,
                   #"{"delivery": {"batchSize": 1, "maxInFlight": 100000, "connectionsPerHost": 64, "maxAttempts": 20}}"#,
                   #"{"delivery": {"batchSize": 1000000, "retryBaseSeconds": 60, "retryMaxSeconds": 3600, "requestTimeoutSeconds": 600}}"#] {
            #expect(try configError(ok) == nil, "\(ok)")
        }
    }

    @Test func serveRefusesAKeyCacheOverOneSecond() throws {
        let dir = TemporaryDirectory("cfg-serve")
        try Data(#"{"keyCacheSeconds": 5}"#.utf8).write(to: URL(fileURLWithPath: dir.sub("config.json")))
        let r = try runWithDeadline(["serve", "--data", dir.sub("data"), "--listen", "127.0.0.1:0", "--config", dir.sub("config.json"), "--quiet"], seconds: 10)
        #expect(r.status == 2, "\(r)")
        #expect(r.stderr.contains("'keyCacheSeconds' must be 0 to 1 seconds, not 5"), "\(r.stderr)")
        #expect(!r.stdout.contains("listening on"))
    }

    // MARK: 5. load stops cleanly on SIGTERM/SIGINT and says where to resume

    func lastSeq(_ data: String) throws -> Int? {
        let r = try topicstore(["stats", "--data", data, "--json"])
        guard r.status == 0 else { return nil }
        return ((try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8))) as? [String: Any])?["lastSeq"] as? Int
    }

    func waitUntil(_ seconds: Double = 30, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return true }
            usleep(50_000)
        }
        return false
    }

    struct LoadProcess {
        let process = Process()
        let out = Pipe(), err = Pipe(), input = Pipe()
        init(_ arguments: [String]) throws {
            process.executableURL = URL(fileURLWithPath: BuiltProducts.executable("topicstore"))
            process.arguments = arguments
            process.standardOutput = out
            process.standardError = err
            process.standardInput = input
            try process.run()
        }
        /// Waits (at most 30 s) and returns the exit status and standard output.
        func finish() -> (status: Int32?, reason: Process.TerminationReason, stdout: String) {
            let deadline = Date().addingTimeInterval(30)
            while process.isRunning && Date() < deadline { usleep(20_000) }
            if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit(); return (nil, .uncaughtSignal, "") }
            process.waitUntilExit()
            let o = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            return (process.terminationStatus, process.terminationReason, o)
        }
    }

    static func registerLines(_ range: Range<Int>) -> String {
        range.map { #"{"project":"demo","type":"register","device_id":"D\#($0)","topics":["t\#($0 % 50)"]}"# + "\n" }.joined()
    }

    /// A long load from a file, SIGTERM in the middle: exit 6, the summary names the last
    /// line read, and exactly the lines up to it are in the store.
    @Test func loadStopsOnSIGTERMAndNamesTheResumePoint() throws {
        let dir = TemporaryDirectory("load-term")
        try Data(Self.registerLines(0..<200_000).utf8).write(to: URL(fileURLWithPath: dir.sub("in.jsonl")))
        let data = dir.sub("data")
        let load = try LoadProcess(["load", "--data", data, "--batch", "64", dir.sub("in.jsonl")])
        #expect(try waitUntil { (try lastSeq(data) ?? 0) > 0 })
        kill(load.process.processIdentifier, SIGTERM)
        let r = load.finish()
        #expect(r.reason == .exit && r.status == 6, "\(r)")
        let match = try #require(r.stdout.firstMatch(of: /stopped by SIGTERM after line (\d+) \(resume at line (\d+)\): applied (\d+) commands \(seq 1…(\d+)\)/), "\(r.stdout)")
        let line = Int(match.1)!
        #expect(line < 200_000, "the load finished before the signal; make the input longer")
        #expect(Int(match.2) == line + 1 && Int(match.3) == line && Int(match.4) == line)
        #expect(try lastSeq(data) == line)
    }

    /// Waiting on standard input (a producer that has paused), SIGINT still stops it, and the
    /// lines read but not yet a full batch are committed.
    @Test func loadStopsOnSIGINTWhileStandardInputWaits() throws {
        let dir = TemporaryDirectory("load-int")
        let data = dir.sub("data")
        let load = try LoadProcess(["load", "--data", data, "--batch", "1000", "--json", "-"])
        load.input.fileHandleForWriting.write(Data(Self.registerLines(0..<2500).utf8))
        // Two batches committed, the last 500 lines parsed and waiting for more input.
        #expect(try waitUntil { (try lastSeq(data) ?? 0) >= 2000 })
        usleep(300_000)
        kill(load.process.processIdentifier, SIGINT)
        let r = load.finish()
        try? load.input.fileHandleForWriting.close()
        #expect(r.reason == .exit && r.status == 6, "\(r)")
        let report = (try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8))) as? [String: Any] ?? [:]
        #expect(report["signal"] as? String == "SIGINT" && report["stopped"] as? Bool == true, "\(r.stdout)")
        #expect(report["lines"] as? Int == 2500 && report["applied"] as? Int == 2500 && report["lastSeq"] as? Int == 2500, "\(r.stdout)")
        #expect(try lastSeq(data) == 2500)
    }

    // MARK: stores that must exist, and files that are not topicstore's

    /// A review ran `compact` on a directory holding another program's LMDB
    /// file: it exited 0 and the file was gone (folded into a new generation).
    /// Opening such a file for writing is refused; nothing is written or removed.
    @Test func aForeignLMDBFileIsNeverTakenOver() throws {
        let dir = TemporaryDirectory("foreign")
        let foreign = dir.sub("foreign")
        try FileManager.default.createDirectory(atPath: foreign, withIntermediateDirectories: true)
        do {
            let env = try Environment(path: foreign)
            let db = try env.openDatabases(["other"], create: true)[0]
            try env.write { txn in try txn.put(db, Array("k".utf8), Array("v".utf8)) }
        }
        let before = fileContents(under: foreign)
        #expect(throws: StoreError.self) { try TopicStore(directory: foreign) }
        for command in [["compact", "--retain", "30d"], ["credentials", "list"], ["project", "add", "shop"], ["load", "-"]] {
            let r = try topicstore(command + ["--data", foreign], stdin: "")
            #expect(r.status == 3, "\(command): \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("did not write"), "\(command): \(r.stderr)")
        }
        #expect(fileContents(under: foreign) == before, "the foreign file is untouched, nothing was added beside it")
    }

    /// Keys and credentials belong to a store's projects: their commands never create a store.
    @Test func keyAndCredentialCommandsNeedAStore() throws {
        let dir = TemporaryDirectory("no-store")
        let missing = dir.sub("missing")
        for command in [["key", "add", "--project", "p", "--kind", "client"], ["key", "revoke", "tsc_x"],
                        ["credentials", "list"], ["credentials", "remove", "--project", "p", "--apns"]] {
            let r = try topicstore(command + ["--data", missing])
            #expect(r.status == 3, "\(command): \(r.status) \(r.stderr)")
            #expect(!FileManager.default.fileExists(atPath: missing), "\(command) created the store")
        }
    }
}

