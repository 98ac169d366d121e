import Foundation
import Testing

/// The `topicstore` executable as an operator uses it: real processes, real files.
@Suite struct CommandLineTests: RunsTopicstore {
    func json(_ text: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? [:]
    }

    static let commands = """
    {"project":"demo","type":"token","device_id":"D1","token":"aaaa1111","platform":"ios"}
    {"project":"demo","type":"token","device_id":"D2","token":"bbbb2222","platform":"and"}
    {"project":"demo","type":"register","device_id":"D1","topics":[{"code":"news","title":"News","single":false},"all","user.1"]}
    {"project":"demo","type":"register","device_id":"D2","topics":["news","all"]}
    {"project":"demo","type":"bogus"}
    {"project":"demo","type":"register","device_id":"D3","topics":["all"]}
    """

    @Test func loadReportsBadLinesAndAppliesTheRest() throws {
        let dir = TemporaryDirectory()
        let load = try topicstore(["load", "--data", dir.path, "--json", "-"], stdin: Self.commands)
        #expect(load.status == 5)
        #expect(load.stderr.contains("line 5: type:"))
        let report = json(load.stdout)
        #expect(report["applied"] as? Int == 5 && report["invalid"] as? Int == 1)

        let counts = try topicstore(["audience", "--data", dir.path, "--project", "demo", "--json", "all"])
        #expect(counts.status == 0)
        let c = json(counts.stdout)
        #expect(c["total"] as? Int == 3 && c["ios"] as? Int == 1 && c["android"] as? Int == 1 && c["withoutToken"] as? Int == 1)
        #expect(c["asOfSeq"] as? Int == 5)

        let expr = try topicstore(["audience", "--data", dir.path, "--project", "demo", "--json", "--expr", "all AND NOT news"])
        #expect(json(expr.stdout)["total"] as? Int == 1)

        let tokens = try topicstore(["audience", "--data", dir.path, "--project", "demo", "--tokens", "news"])
        let lines = tokens.stdout.split(separator: "\n").map { json(String($0)) }
        #expect(lines.count == 2)
        #expect(Set(lines.compactMap { $0["token"] as? String }) == ["aaaa1111", "bbbb2222"])
        #expect(Set(lines.compactMap { $0["platform"] as? String }) == ["ios", "android"])

        let topics = json(try topicstore(["topics", "--data", dir.path, "--project", "demo", "--json"]).stdout)
        let list = topics["topics"] as? [[String: Any]] ?? []
        #expect(list.first { $0["code"] as? String == "news" }?["title"] as? String == "News")
        #expect(list.first { $0["code"] as? String == "all" }?["subscribers"] as? Int == 3)

        let device = json(try topicstore(["device", "--data", dir.path, "--project", "demo", "--json", "D1"]).stdout)
        #expect(device["token"] as? String == "aaaa1111" && device["state"] as? String == "live")
        #expect((device["topics"] as? [String])?.sorted() == ["all", "news", "user.1"])
        #expect(try topicstore(["device", "--data", dir.path, "--project", "demo", "nobody"]).status == 1)

        let stats = json(try topicstore(["stats", "--data", dir.path, "--json"]).stdout)
        #expect(stats["lastSeq"] as? Int == 5)
        #expect(stats["schemaVersion"] as? Int == 13 && stats["topicLayout"] as? String == "compact")
        #expect((stats["projects"] as? [[String: Any]])?.first?["topics"] as? Int == 3)

        // A project added but not yet written to is listed too, with zeros (it was left out).
        #expect(try topicstore(["project", "add", "--data", dir.path, "empty"]).status == 0)
        let after = json(try topicstore(["stats", "--data", dir.path, "--json"]).stdout)
        let projects = after["projects"] as? [[String: Any]] ?? []
        #expect(projects.map { $0["name"] as? String } == ["demo", "empty"], "\(projects)")
        #expect(projects.last?["devices"] as? Int == 0 && projects.last?["topics"] as? Int == 0)
        #expect(try topicstore(["stats", "--data", dir.path]).stdout.contains("project empty: 0 devices, 0 live tokens, 0 topics"))
    }

    @Test func stopOnErrorAppliesNothingAfterTheBadLine() throws {
        let dir = TemporaryDirectory()
        let load = try topicstore(["load", "--data", dir.path, "--stop-on-error", "-"], stdin: Self.commands)
        #expect(load.status == 5)
        let stats = json(try topicstore(["stats", "--data", dir.path, "--json"]).stdout)
        #expect(stats["lastSeq"] as? Int == 4)
    }

    @Test func aLoadOfManyBatchesAppliesEveryLineInOrder() throws {
        // Batches of 7 while the next is parsed: later lines must still land later,
        // and the bad lines be reported with their own numbers.
        let dir = TemporaryDirectory()
        var lines: [String] = []
        for i in 0..<600 {
            lines.append(#"{"project":"demo","type":"token","device_id":"D\#(i % 50)","token":"tok-\#(i)","platform":"ios"}"#)
            if i % 97 == 0 { lines.append("{not json") }
        }
        let load = try topicstore(["load", "--data", dir.path, "--batch", "7", "--json", "-"], stdin: lines.joined(separator: "\n") + "\n")
        #expect(load.status == 5)
        let report = json(load.stdout)
        #expect(report["applied"] as? Int == 600 && report["invalid"] as? Int == 7 && report["failed"] as? Int == 0)
        #expect(report["firstSeq"] as? Int == 1 && report["lastSeq"] as? Int == 600)
        let bad = load.stderr.split(separator: "\n").filter { $0.contains("not valid JSON") }
        #expect(bad.count == 7 && bad.first?.contains("line 2:") == true, "\(bad)")
        // Each device holds the token of its last line.
        for d in [0, 13, 49] {
            let device = json(try topicstore(["device", "--data", dir.path, "--project", "demo", "--json", "D\(d)"]).stdout)
            #expect(device["token"] as? String == "tok-\(550 + d)")
        }
    }

    /// An "e" with 32,768 combining accents is one character of 65,537 bytes: as a title it
    /// killed `load` (exit 132) and lost the good lines of its batch. It is a bad line now,
    /// reported with its number, as a title of 257 code points in one character is.
    @Test func loadReportsAnOversizedTitleAndAppliesTheRestOfItsBatch() throws {
        func title(marks: Int) -> String { "e" + String(repeating: "\u{301}", count: marks) }
        let lines = [
            #"{"project":"demo","type":"register","device_id":"D1","topics":["all"]}"#,
            #"{"project":"demo","type":"register","device_id":"Z1","topics":[{"code":"zalgo","title":"\#(title(marks: 32_768))"}]}"#,
            #"{"project":"demo","type":"register","device_id":"D2","topics":["all"]}"#,
            #"{"project":"demo","type":"register","device_id":"Z2","topics":[{"code":"zalgo","title":"\#(title(marks: 256))"}]}"#,
            #"{"project":"demo","type":"register","device_id":"D3","topics":["all",{"code":"zalgo","title":"\#(title(marks: 255))"}]}"#,
        ]
        let input = lines.joined(separator: "\n") + "\n"
        let dir = TemporaryDirectory()
        let load = try topicstore(["load", "--data", dir.path, "--json", "-"], stdin: input)
        #expect(load.status == 5, "\(load.stderr)")
        let report = json(load.stdout)
        #expect(report["applied"] as? Int == 3 && report["invalid"] as? Int == 2 && report["failed"] as? Int == 0, "\(load.stdout)")
        for n in [2, 4] {
            #expect(load.stderr.contains("line \(n): topics.0.title: The title may not be greater than 256 characters."), "\(load.stderr)")
        }
        let all = json(try topicstore(["audience", "--data", dir.path, "--project", "demo", "--json", "all"]).stdout)
        #expect(all["total"] as? Int == 3 && all["asOfSeq"] as? Int == 3)
        let topics = json(try topicstore(["topics", "--data", dir.path, "--project", "demo", "--json"]).stdout)["topics"] as? [[String: Any]]
        #expect(topics?.first { $0["code"] as? String == "zalgo" }?["title"] as? String == title(marks: 255))

        let stopped = TemporaryDirectory()
        let stop = try topicstore(["load", "--data", stopped.path, "--stop-on-error", "--json", "-"], stdin: input)
        #expect(stop.status == 5 && json(stop.stdout)["applied"] as? Int == 1, "\(stop.stdout) \(stop.stderr)")
    }

    /// The text listing is one topic per line: a title's control characters (a NUL, a newline)
    /// are escaped as in JSON, and so are its quotes and backslashes; --json was already right.
    @Test func topicsTextEscapesControlCharactersInTitles() throws {
        let dir = TemporaryDirectory()
        let line = #"{"project":"demo","type":"register","device_id":"D1","topics":[{"code":"t1","title":"a\u0000b\nc\r\td \"q\" \\ \u007f\u0085\u2028é"},"t2"]}"#
        #expect(try topicstore(["load", "--data", dir.path, "-"], stdin: line + "\n").status == 0)
        let text = try topicstore(["topics", "--data", dir.path, "--project", "demo"])
        #expect(text.status == 0)
        let lines = text.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count == 4, "\(lines)")  // the heading, two topics, and the end of the last line
        #expect(lines[1] == #"  t1  1 subscriber  "a\u0000b\nc\r\td \"q\" \\ \u007f\u0085\u2028é""#, "\(lines)")
        #expect(lines[2] == #"  t2  1 subscriber  "t2""#)
        let listed = json(try topicstore(["topics", "--data", dir.path, "--project", "demo", "--json"]).stdout)["topics"] as? [[String: Any]]
        #expect(listed?.first?["title"] as? String == "a\u{0}b\nc\r\td \"q\" \\ \u{7f}\u{85}\u{2028}é")
    }

    @Test func foreignDirectoriesAndBadUsageHaveTheirExitCodes() throws {
        let dir = TemporaryDirectory()
        try Data("x".utf8).write(to: URL(fileURLWithPath: dir.sub("other.txt")))
        let refused = try topicstore(["stats", "--data", dir.path])
        #expect(refused.status == 3)
        #expect(refused.stderr.contains("is not a topicstore database"))
        #expect(try topicstore(["load", "--data", dir.path, "-"], stdin: "").status == 3)
        #expect(try topicstore(["audience", "--data", dir.path]).status == 2)
        #expect(try topicstore(["audience", "--bogus"]).status == 2)
        #expect(try topicstore(["nope"]).status == 2)
        #expect(try topicstore(["audience", "--data", dir.path, "--project", "p", "--expr", "a AND ("]).status == 2)
    }

    /// `serve --threads N`: N ≥ 1 is an epoll pool, 0 a thread per connection; a negative N is
    /// bad usage (exit 2, the flag named), from the command line and from a config file alike.
    @Test func serveRefusesANegativeThreadCount() throws {
        let dir = TemporaryDirectory()
        for n in ["-1", "-4"] {
            let r = try runWithDeadline(["serve", "--data", dir.sub("data"), "--listen", "127.0.0.1:0", "--threads", n, "--quiet"])
            #expect(r.status == 2, "\(r)")
            #expect(r.stderr.contains("--threads must be 0 (a thread per connection) or a positive number of pool threads, not \(n)"), "\(r.stderr)")
            #expect(!r.stdout.contains("listening on"))
        }
        try Data(#"{"threads": -1}"#.utf8).write(to: URL(fileURLWithPath: dir.sub("config.json")))
        let r = try runWithDeadline(["serve", "--data", dir.sub("data"), "--listen", "127.0.0.1:0", "--config", dir.sub("config.json"), "--quiet"])
        #expect(r.status == 2, "\(r)")
        #expect(r.stderr.contains("'threads' must be 0 (a thread per connection) or a positive number of pool threads, not -1"), "\(r.stderr)")
        // 0 and 1 still start.
        for n in ["0", "1"] {
            let serve = try ServeProcess(data: dir.sub("data"), extra: ["--threads", n])
            #expect(try RawHTTPClient(port: serve.port).request("GET", "/healthz").status == 200)
            serve.signal(SIGTERM)
            #expect(serve.wait() == 0)
        }
    }

    /// A config file's numbers are checked, never converted blindly: a huge or
    /// fractional count, a negative time or rate is a clear error (exit 2).
    @Test(arguments: [
        (#"{"connectionLimit": 1e30}"#, "'connectionLimit' must be a whole number"),
        (#"{"bodyLimitBytes": 0}"#, "'bodyLimitBytes' must be a whole number"),
        (#"{"audiencePageLimit": 2.5}"#, "'audiencePageLimit' must be a whole number"),
        (#"{"shutdownTimeoutSeconds": -1}"#, "'shutdownTimeoutSeconds' must be 0 to 86400 seconds"),
        (#"{"connectionTimeoutSeconds": 0}"#, "'connectionTimeoutSeconds' must be a whole number of seconds from 1 to 3600"),
        (#"{"connectionTimeoutSeconds": 1.5}"#, "'connectionTimeoutSeconds' must be a whole number of seconds from 1 to 3600"),
        (#"{"connectionTimeoutSeconds": 4000}"#, "'connectionTimeoutSeconds' must be a whole number of seconds from 1 to 3600"),
        (#"{"rateLimit": {"client": {"perSecond": -1}}}"#, "rateLimit.client must be"),
        (#"{"rateLimit": {"server": {"perSecond": 5, "burst": 1e300}}}"#, "rateLimit.server.burst must be"),
    ])
    func serveRefusesOutOfRangeSettings(config: String, message: String) throws {
        let dir = TemporaryDirectory()
        try Data(config.utf8).write(to: URL(fileURLWithPath: dir.sub("config.json")))
        let r = try runWithDeadline(["serve", "--data", dir.sub("data"), "--listen", "127.0.0.1:0", "--config", dir.sub("config.json"), "--quiet"])
        #expect(r.status == 2, "\(r)")
        #expect(r.stderr.contains(message), "\(r.stderr)")
        #expect(!r.stdout.contains("listening on"))
    }

    @Test(arguments: ["load", "audience", "topics", "device", "stats"])
    func everyCommandHasHelp(command: String) throws {
        let help = try topicstore([command, "--help"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("usage: topicstore \(command)"))
        #expect(help.stdout.contains("--data DIR") && help.stdout.contains("--json") && help.stdout.contains("exit codes"))
    }
}
