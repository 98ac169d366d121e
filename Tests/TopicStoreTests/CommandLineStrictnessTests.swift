import Foundation
import Testing

/// The command line refuses what it cannot read exactly, and says what it did:
/// strict times, stores that must exist, unknown projects, repeated
/// project and key operations, unexpected arguments.
@Suite struct CommandLineStrictnessTests: RunsTopicstore {
    func json(_ text: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? [:]
    }

    static let commands = """
    {"project":"demo","type":"token","device_id":"D1","token":"aaaa1111","platform":"ios"}
    {"project":"demo","type":"register","device_id":"D1","topics":["news","all"]}
    {"project":"demo","type":"register","device_id":"D2","topics":["all"]}
    """

    // MARK: projects the data names

    /// Commands loaded for a project never added made `project list` say "no projects"
    /// of a store holding its devices.
    @Test func projectListShowsProjectsThatOnlyHaveData() throws {
        let dir = TemporaryDirectory("project-data")
        let data = try loadedStore(dir, Self.commands)
        let list = try topicstore(["project", "list", "--data", data])
        #expect(list.status == 0 && list.stdout.contains("demo  2 devices, not added (no API keys): topicstore project add demo"), "\(list.stdout)")
        #expect(!list.stdout.contains("no projects"))
        let add = try topicstore(["project", "add", "--data", data, "demo"])
        #expect(add.stdout.contains("created project demo (the store already holds 2 device(s) of it)"), "\(add.stdout)")
        let json = json(try topicstore(["project", "list", "--data", data, "--json"]).stdout)
        let projects = json["projects"] as? [[String: Any]] ?? []
        #expect(projects.count == 1 && projects.first?["devices"] as? Int == 2 && projects.first?["added"] == nil, "\(json)")
    }

    // MARK: import in rounds

    /// import takes replay's --memory-budget: built in rounds of 1 MiB, written through,
    /// or in memory, the same store (same records, same projections).
    @Test func importInRoundsBuildsTheSameStore() throws {
        let dir = TemporaryDirectory("import-budget")
        var commands: [String] = []
        for i in 0..<3000 {
            commands.append(#"{"project":"demo","type":"token","device_id":"D\#(i)","token":"tok\#(i)","platform":"\#(i % 3 == 0 ? "android" : "ios")"}"#)
            commands.append(#"{"project":"demo","type":"register","device_id":"D\#(i)","topics":["all","t\#(i % 17)",{"code":"user.\#(i)","single":true}]}"#)
            if i % 7 == 0 { commands.append(#"{"project":"demo","type":"unregister","device_id":"D\#(i / 2)","topics":["all"]}"#) }
        }
        let data = try loadedStore(dir, commands.joined(separator: "\n"))
        let export = try topicstore(["export", "--data", data])
        #expect(export.status == 0)
        var outputs: [String] = []
        for budget in ["1", "0", "512"] {
            let target = dir.sub("imported-\(budget)")
            let imported = try topicstore(["import", "--data", target, "--memory-budget", budget, "-"], stdin: export.stdout)
            #expect(imported.status == 0, "\(budget): \(imported.stderr)")
            let audit = try topicstore(["audit", "--data", target])
            #expect(audit.status == 0, "\(budget): \(audit.stdout)")
            outputs.append(try topicstore(["export", "--data", target]).stdout
                           + (try topicstore(["topics", "--data", target, "--project", "demo"]).stdout))
        }
        #expect(outputs[0] == outputs[1] && outputs[1] == outputs[2])
        #expect(outputs[0].hasPrefix(export.stdout))
    }

    // MARK: export of a compacted log

    /// An export of what compaction removed was empty with exit 0, which reads as "no events".
    @Test func exportBeforeTheCompactionHorizonIsAnError() throws {
        let dir = TemporaryDirectory("export-horizon")
        let data = try loadedStore(dir, Self.commands)
        let compact = try topicstore(["compact", "--data", data, "--retain", "0"])
        #expect(compact.status == 0, "\(compact.stderr)")
        // Compaction keeps the last record (horizon 2); one more command adds seq 4.
        let more = try topicstore(["load", "--data", data, "-"], stdin: #"{"project":"demo","type":"register","device_id":"D3","topics":["news"]}"#)
        #expect(more.status == 0)
        for range in [["--from-seq", "1"], ["--from-seq", "2"], ["--to-seq", "1"]] {
            let r = try topicstore(["export", "--data", data] + range)
            #expect(r.status == 1 && r.stdout.isEmpty, "\(range): \(r.status) \(r.stdout)")
            #expect(r.stderr.contains("before the compaction horizon, seq 2"), "\(range): \(r.stderr)")
        }
        let all = try topicstore(["export", "--data", data])
        #expect(all.status == 0 && all.stdout.split(separator: "\n").count == 2 && all.stdout.hasPrefix("{\"seq\":3"), "\(all.stdout)")
        #expect(all.stderr.contains("compacted at seq 2: exporting from seq 3"), "\(all.stderr)")
        let after = try topicstore(["export", "--data", data, "--from-seq", "3"])
        #expect(after.status == 0 && after.stdout.contains("\"seq\":4") && after.stderr.isEmpty, "\(after.stderr)")
        // Past the log's end is an error, as for replay (an auditor review got an empty export with
        // exit 0, and a --to-seq silently cut); so are sequence 0 and a signed number.
        for range in [["--from-seq", "5"], ["--to-seq", "5"], ["--from-seq", "3", "--to-seq", "9"]] {
            let r = try topicstore(["export", "--data", data] + range)
            #expect(r.status == 1 && r.stdout.isEmpty && r.stderr.contains("beyond the log, which ends at 4"), "\(range): \(r.status) \(r.stderr)")
        }
        for (range, message) in [(["--to-seq", "0"], "--to-seq 0: the log's sequences start at 1"), (["--from-seq", "+3"], "--from-seq must be a sequence number"),
                                 (["--from-seq", "4", "--to-seq", "3"], "--from-seq 4 is after --to-seq 3")] {
            let r = try topicstore(["export", "--data", data] + range)
            #expect(r.status == 2 && r.stderr.contains(message), "\(range): \(r.status) \(r.stderr)")
        }
        #expect(try topicstore(["replay", "--data", data, "--to-seq", "+4", "--out", dir.sub("plus")]).status == 2)
    }

    /// A compaction refused because another one holds the store has its own exit code (7), so a
    /// cron wrapper tells it from a failure (an operator review found both exit 1).
    @Test func compactBusyHasItsOwnExitCode() throws {
        let dir = TemporaryDirectory("compact-busy")
        let data = try loadedStore(dir, #"{"project":"demo","type":"register","device_id":"d1","topics":["all"]}"# + "\n")
        let fd = open(data, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        #expect(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0, "the lock another compaction would hold")
        let busy = try topicstore(["compact", "--data", data, "--retain", "0"])
        #expect(busy.status == 7 && busy.stderr.contains("another compaction is running") && busy.stderr.contains("nothing was done"), "\(busy.status) \(busy.stderr)")
        close(fd)
        #expect(try topicstore(["compact", "--data", data, "--retain", "0"]).status == 0)
    }

    /// An operator review found a failed import's partial store left behind: it audited clean
    /// (as of its last good line) and the retry was refused ("it holds data.mdb").
    @Test func aFailedImportLeavesNothingAndCanBeRetried() throws {
        let dir = TemporaryDirectory("import-fails")
        let lines = (0..<50).map { #"{"project":"demo","type":"register","device_id":"d\#($0)","topics":["all"]}"# }
        let data = try loadedStore(dir, lines.joined(separator: "\n") + "\n")
        let export = try topicstore(["export", "--data", data])
        var exported = export.stdout.split(separator: "\n").map(String.init)
        let good = exported.joined(separator: "\n") + "\n"
        exported[30] = #"{"seq":31,"broken"#
        let broken = exported.joined(separator: "\n") + "\n"
        let fresh = dir.sub("fresh")
        let failed = try topicstore(["import", "--data", fresh, "-"], stdin: broken)
        #expect(failed.status == 5 && failed.stderr.contains("line 31") && failed.stderr.contains("nothing imported"), "\(failed.stderr)")
        #expect(!FileManager.default.fileExists(atPath: fresh))
        // An empty directory given: left empty.
        let empty = dir.sub("empty")
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        #expect(try topicstore(["import", "--data", empty, "-"], stdin: broken).status == 5)
        #expect(try FileManager.default.contentsOfDirectory(atPath: empty) == [])
        let retried = try topicstore(["import", "--data", empty, "-"], stdin: good)
        #expect(retried.status == 0 && retried.stdout.contains("imported 50 records"), "\(retried.stderr)")
    }

    /// An auditor review loaded a slice of an export into an empty store and got the slice's effects
    /// alone, without a word: load now says what it does with such lines (it still does it).
    @Test func loadingASliceOfAnExportSaysWhatItIs() throws {
        let dir = TemporaryDirectory("export-slice")
        let data = try loadedStore(dir, [#"{"project":"demo","type":"token","device_id":"D1","token":"t1","platform":"ios"}"#,
                                         #"{"project":"demo","type":"register","device_id":"D1","topics":["news"]}"#,
                                         #"{"project":"demo","type":"unregister","device_id":"D1","topics":["news"]}"#].joined(separator: "\n") + "\n")
        let slice = try topicstore(["export", "--data", data, "--from-seq", "2"])
        let partial = try topicstore(["load", "--data", dir.sub("partial"), "-"], stdin: slice.stdout)
        #expect(partial.status == 0 && partial.stderr.contains("note: line 1 is record 2 of an export, and this store's next sequence is 1"), "\(partial.stderr)")
        let whole = try topicstore(["export", "--data", data])
        let full = try topicstore(["load", "--data", dir.sub("full"), "-"], stdin: whole.stdout)
        #expect(full.status == 0 && !full.stderr.contains("note:"), "\(full.stderr)")
    }

    // MARK: topics in pages

    @Test func topicsPageByPrefixAfterAndLimit() throws {
        let dir = TemporaryDirectory("topic-pages")
        let data = try loadedStore(dir, Self.commands)
        let page = try topicstore(["topics", "--data", data, "--project", "demo", "--limit", "1", "--json"])
        #expect(page.status == 0 && json(page.stdout)["next"] as? String == "all", "\(page.stdout)")
        #expect((json(page.stdout)["topics"] as? [[String: Any]])?.map { $0["code"] as? String } == ["all"])
        let rest = try topicstore(["topics", "--data", data, "--project", "demo", "--after", "all"])
        #expect(rest.status == 0 && rest.stdout.contains("1 topic in demo") && rest.stdout.contains("news  1 subscriber "), "\(rest.stdout)")
        #expect(!rest.stdout.contains("more topics follow"))
        let text = try topicstore(["topics", "--data", data, "--project", "demo", "--limit", "1"])
        #expect(text.stdout.hasSuffix("more topics follow: --after all\n"), "\(text.stdout)")
        let prefixed = try topicstore(["topics", "--data", data, "--project", "demo", "--prefix", "ne", "--json"])
        #expect((json(prefixed.stdout)["topics"] as? [[String: Any]])?.map { $0["code"] as? String } == ["news"])
        for bad in [["--limit", "0"], ["--prefix", "a b"], ["--after", "x y"], ["--limit", "many"]] {
            let r = try topicstore(["topics", "--data", data, "--project", "demo"] + bad)
            #expect(r.status == 2, "\(bad): \(r.stderr)")
        }
    }

    // MARK: replay --at

    @Test func replayAtAcceptsTheDocumentedForms() throws {
        let dir = TemporaryDirectory("at-ok")
        let data = try loadedStore(dir, Self.commands)
        // Every form, and the sequence it reaches: the store's events are all from "now".
        let cases: [(String, Int)] = [
            ("2001-01-01", 0),
            ("2199-12-31", 3),
            ("2001-01-01T00:00:00Z", 0),
            ("2199-12-31T23:59:59Z", 3),
            ("2199-12-31T23:59:59.999Z", 3),
            ("2199-12-31t23:59:59z", 3),
            ("2199-12-31T23:59:59+01:00", 3),
            ("2199-12-31T22:29:59-0130", 3),     // 23:59:59Z: an offset may not carry a time past 2200
            ("978307200000", 0),            // 2001-01-01 in ms
            ("7258118399999", 3),           // just before 2200
        ]
        for (i, (text, through)) in cases.enumerated() {
            let r = try topicstore(["replay", "--data", data, "--at", text, "--out", dir.sub("out\(i)"), "--json"])
            #expect(r.status == 0, "--at \(text): \(r.stderr)")
            #expect(json(r.stdout)["throughSeq"] as? Int == through, "--at \(text): \(r.stdout)")
        }
    }

    @Test func replayAtRefusesAnythingElse() throws {
        let dir = TemporaryDirectory("at-bad")
        let data = try loadedStore(dir, Self.commands)
        let cases: [(String, String)] = [
            ("2026-11-30 23:59:59", "not a space"),
            ("2026-11-30T23:59", "seconds"),
            ("2026-11-30garbage", "after the date"),
            ("2026-11-30T23:59:59", "give a zone"),
            ("2026-11-30T23:59:59Zjunk", "after the time"),
            ("2026-11-30T23:59:59+01", "zone's minutes"),
            ("2026-02-30", "day 30 does not exist"),
            ("2026-13-01", "month 13"),
            ("2026-11-30T24:00:00Z", "hour 24"),
            ("2026-11-30T23:59:60Z", "second 60"),
            ("2026-11-30T23:59:59.Z", "fraction"),
            ("1796064534", "looks like seconds since 1970"),
            ("0", "between 2000-01-01"),
            ("99999999999999999999", "too large"),
            ("-5", "signed number"),
            ("yesterday", "expected 4 digits of the year"),
            ("", "empty"),
            (" 2026-11-30", "expected 4 digits of the year"),
        ]
        for (i, (text, reason)) in cases.enumerated() {
            let out = dir.sub("out\(i)")
            let r = try topicstore(["replay", "--data", data, "--at", text, "--out", out])
            #expect(r.status == 2, "--at '\(text)' exited \(r.status): \(r.stdout)")
            #expect(r.stderr.contains("--at '\(text)' is not a time"), "\(r.stderr)")
            #expect(r.stderr.contains(reason), "--at '\(text)': \(r.stderr)")
            // The message lists the accepted forms.
            #expect(r.stderr.contains("milliseconds since 1970") && r.stderr.contains("2026-03-01T12:00:00Z"), "\(r.stderr)")
            #expect(!FileManager.default.fileExists(atPath: out), "--at '\(text)' created \(out)")
        }
        // Seconds get the milliseconds they probably meant.
        let seconds = try topicstore(["replay", "--data", data, "--at", "1796064534", "--out", dir.sub("s")])
        #expect(seconds.stderr.contains("give 1796064534000"), "\(seconds.stderr)")
    }

    /// compact's durations (the other times the command line takes) are strict already: kept so.
    @Test func compactDurationsAreStrict() throws {
        let dir = TemporaryDirectory("durations")
        for bad in ["30dgarbage", "30", "1.5d", "30d ", "-1d", "d"] {
            for option in ["retain", "topic-idle", "rejected-grace"] {
                var args = ["compact", "--data", dir.sub("none"), "--\(option)", bad]
                if option != "retain" { args += ["--retain", "30d"] }
                let r = try topicstore(args)
                #expect(r.status == 2, "--\(option) '\(bad)': \(r.stderr)")
                #expect(r.stderr.contains("--\(option) must be a duration like 30d"), "\(r.stderr)")
            }
        }
    }

    // MARK: compact needs an existing store

    @Test func compactRefusesWhatIsNotAStoreAndCreatesNothing() throws {
        let dir = TemporaryDirectory("compact-nostore")
        let empty = dir.sub("empty")
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        let foreign = dir.sub("foreign")
        try FileManager.default.createDirectory(atPath: foreign, withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: foreign + "/notes.txt"))
        for extra in [[], ["--dry-run"]] {
            let e = try topicstore(["compact", "--data", empty, "--retain", "30d"] + extra)
            #expect(e.status == 3, "\(extra) \(e.stdout) \(e.stderr)")
            #expect(e.stderr.contains("\(empty) is not a topicstore database: it holds no data.mdb"), "\(e.stderr)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: empty).isEmpty, "compact left files behind")

            let missing = dir.sub("missing")
            let m = try topicstore(["compact", "--data", missing, "--retain", "30d"] + extra)
            #expect(m.status == 3, "\(extra) \(m.stdout) \(m.stderr)")
            #expect(m.stderr.contains("\(missing) is not a topicstore database: the directory does not exist"), "\(m.stderr)")
            #expect(!FileManager.default.fileExists(atPath: missing))

            let f = try topicstore(["compact", "--data", foreign, "--retain", "30d"] + extra)
            #expect(f.status == 3, "\(f.stderr)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: foreign) == ["notes.txt"])
        }
        // The same message and code as any other command on those directories.
        let stats = try topicstore(["stats", "--data", empty])
        #expect(stats.status == 3 && stats.stderr.contains("it holds no data.mdb"))
        // A real store still compacts.
        let data = try loadedStore(dir, Self.commands)
        let ok = try topicstore(["compact", "--data", data, "--retain", "30d"])
        #expect(ok.status == 0, "\(ok.stderr)")
    }

    // MARK: unknown projects

    @Test func unknownProjectIsNamedNotJustEmpty() throws {
        let dir = TemporaryDirectory("noproject")
        let data = try loadedStore(dir, Self.commands)

        let text = try topicstore(["audience", "--data", data, "--project", "nosuchproj", "news"])
        #expect(text.status == 0)
        #expect(text.stdout.hasPrefix("0 devices"), "\(text.stdout)")
        #expect(text.stderr.contains("no project named nosuchproj in this store"), "\(text.stderr)")

        let j = try topicstore(["audience", "--data", data, "--project", "nosuchproj", "--json", "news"])
        #expect(j.status == 0)
        let counts = json(j.stdout)
        #expect(counts["total"] as? Int == 0 && counts["asOfSeq"] as? Int == 3)
        #expect(counts["unknownProject"] as? Bool == true, "\(j.stdout)")
        #expect(j.stderr.contains("no project named nosuchproj"), "\(j.stderr)")

        let expr = try topicstore(["audience", "--data", data, "--project", "nosuchproj", "--expr", "devices:all"])
        #expect(expr.status == 0 && expr.stderr.contains("no project named nosuchproj"), "\(expr.stderr)")
        let tokens = try topicstore(["audience", "--data", data, "--project", "nosuchproj", "--tokens", "news"])
        #expect(tokens.status == 0 && tokens.stdout.isEmpty && tokens.stderr.contains("no project named nosuchproj"))

        let topics = try topicstore(["topics", "--data", data, "--project", "nosuchproj"])
        #expect(topics.status == 0)
        #expect(topics.stderr.contains("no project named nosuchproj in this store"), "\(topics.stderr)")
        let topicsJSON = try topicstore(["topics", "--data", data, "--project", "nosuchproj", "--json"])
        let list = json(topicsJSON.stdout)
        #expect(topicsJSON.status == 0 && (list["topics"] as? [Any])?.isEmpty == true, "\(topicsJSON.stdout)")
        #expect(list["unknownProject"] as? Bool == true, "\(topicsJSON.stdout)")

        // A known project says nothing of the kind, and has no such field.
        let known = try topicstore(["audience", "--data", data, "--project", "demo", "--json", "news"])
        #expect(known.stderr.isEmpty && json(known.stdout)["unknownProject"] == nil && json(known.stdout)["total"] as? Int == 1)
        let knownTopics = try topicstore(["topics", "--data", data, "--project", "demo", "--json"])
        #expect(knownTopics.stderr.isEmpty && json(knownTopics.stdout)["unknownProject"] == nil)

        // A project added with `project add` that has no devices yet is not unknown (a tenant review).
        #expect(try topicstore(["project", "add", "fresh", "--data", data]).status == 0)
        for args in [["audience", "--json", "news"], ["topics", "--json"], ["history", "--json", "--topic", "news"]] {
            let r = try topicstore([args[0], "--data", data, "--project", "fresh"] + args.dropFirst())
            #expect(r.status == 0 && r.stderr.isEmpty && json(r.stdout)["unknownProject"] == nil, "\(args): \(r.stdout) \(r.stderr)")
        }
        let device = try topicstore(["device", "--data", data, "--project", "fresh", "D1"])
        #expect(device.status == 1 && !device.stderr.contains("no project named"), "\(device.stderr)")
    }

    // MARK: repeated project and key operations

    @Test func addingAnExistingProjectIsANoticeNotAnError() throws {
        let dir = TemporaryDirectory("project-twice")
        let first = try topicstore(["project", "add", "shop", "--data", dir.sub("data"), "--json"])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(json(first.stdout)["created"] as? Bool == true)
        let createdAt = json(first.stdout)["createdAt"] as? Int

        let again = try topicstore(["project", "add", "shop", "--data", dir.sub("data")])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stderr.contains("project 'shop' already exists"), "\(again.stderr)")
        #expect(again.stdout.isEmpty)
        let againJSON = try topicstore(["project", "add", "shop", "--data", dir.sub("data"), "--json"])
        #expect(againJSON.status == 0)
        #expect(json(againJSON.stdout)["created"] as? Bool == false)
        #expect(json(againJSON.stdout)["createdAt"] as? Int == createdAt, "the existing project's creation time")
        // An invalid name is still invalid input.
        #expect(try topicstore(["project", "add", "Shop!", "--data", dir.sub("data")]).status == 5)
    }

    @Test func revokingARevokedKeySaysSo() throws {
        let dir = TemporaryDirectory("key-twice")
        #expect(try topicstore(["project", "add", "shop", "--data", dir.sub("data")]).status == 0)
        let added = try topicstore(["key", "add", "--project", "shop", "--kind", "server", "--data", dir.sub("data"), "--json"])
        let id = try #require(json(added.stdout)["id"] as? String)

        let first = try topicstore(["key", "revoke", id, "--data", dir.sub("data")])
        #expect(first.status == 0)
        #expect(first.stdout.hasPrefix("revoked server key \(id)"), "\(first.stdout)")

        let again = try topicstore(["key", "revoke", id, "--data", dir.sub("data")])
        #expect(again.status == 0)
        #expect(!again.stdout.hasPrefix("revoked"), "\(again.stdout)")
        #expect(again.stdout.contains("was already revoked"), "\(again.stdout)")
        let againJSON = json(try topicstore(["key", "revoke", id, "--data", dir.sub("data"), "--json"]).stdout)
        #expect(againJSON["alreadyRevoked"] as? Bool == true && againJSON["active"] as? Bool == false)
        // An unknown key is still an error.
        #expect(try topicstore(["key", "revoke", "0123456789abcdef", "--data", dir.sub("data")]).status == 5)
    }

    // MARK: unexpected arguments

    @Test(arguments: ["stats", "replay", "audit", "history", "export", "topics", "compact", "serve", "bench", "bench-send", "bench-http"])
    func commandsWithoutOperandsRefuseThem(_ command: String) throws {
        let dir = TemporaryDirectory("operands")
        let r = try topicstore([command, "extra-arg", "--data", dir.sub("nothing")])
        #expect(r.status == 2, "\(command): \(r.stdout) \(r.stderr)")
        #expect(r.stderr.contains("unexpected argument 'extra-arg'") && r.stderr.contains("topicstore \(command)"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.sub("nothing")))
    }

    @Test func unexpectedArgumentsAfterValidOnesToo() throws {
        let dir = TemporaryDirectory("operands2")
        let data = try loadedStore(dir, Self.commands)
        let stats = try topicstore(["stats", "--data", data, "extra-arg"])
        #expect(stats.status == 2 && stats.stdout.isEmpty, "\(stats.stdout)")
        let two = try topicstore(["stats", "--data", data, "a", "b"])
        #expect(two.status == 2 && two.stderr.contains("'a'"), "\(two.stderr)")
        // Actions take only options after them, checked before a store is created.
        for args in [["credentials", "list", "extra-arg"], ["credentials", "bogus"], ["project", "list", "extra-arg"],
                     ["key", "list", "extra-arg"], ["project", "add", "a", "b"]] {
            let r = try topicstore(args + ["--data", dir.sub("none")])
            #expect(r.status == 2, "\(args): \(r.stderr)")
            #expect(!FileManager.default.fileExists(atPath: dir.sub("none")), "\(args) created a store")
        }
        // Commands that take operands keep taking them.
        #expect(try topicstore(["device", "--data", data, "--project", "demo", "D1"]).status == 0)
        #expect(try topicstore(["audience", "--data", data, "--project", "demo", "news", "all"]).status == 0)
        #expect(try topicstore(["stats", "--data", data]).status == 0)
        // The exit codes are in every --help.
        let help = try topicstore(["stats", "--help"])
        #expect(help.stdout.contains("2 bad usage") && help.stdout.contains("unexpected argument"), "\(help.stdout)")
    }

    /// The actions of `key` and `credentials` share one option list: an option of another action
    /// was ignored, and `key revoke ID --project beta` revoked project alpha's key (tenant review).
    /// It is refused now; `key list --kind` and `credentials list --project` filter.
    @Test func anOptionOfAnotherActionIsRefused() throws {
        let dir = TemporaryDirectory("action-options")
        let data = try loadedStore(dir, Self.commands)
        for p in ["alpha", "beta"] { #expect(try topicstore(["project", "add", p, "--data", data]).status == 0) }
        let added = try topicstore(["key", "add", "--project", "alpha", "--kind", "client", "--json", "--data", data])
        let id = try #require((try? JSONSerialization.jsonObject(with: Data(added.stdout.utf8)) as? [String: Any])?["id"] as? String, "\(added.stderr)")
        _ = try topicstore(["key", "add", "--project", "alpha", "--kind", "server", "--data", data])
        let revoke = try topicstore(["key", "revoke", id, "--project", "beta", "--data", data])
        #expect(revoke.status == 2 && revoke.stderr.contains("--project is not an option of 'topicstore key revoke'"), "\(revoke.stderr)")
        let list = try topicstore(["key", "list", "--project", "alpha", "--json", "--data", data])
        let keys = (try? JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [String: Any])?["keys"] as? [[String: Any]] ?? []
        #expect(keys.count == 2 && keys.allSatisfy { $0["revokedAt"] == nil || $0["revokedAt"] is NSNull }, "\(list.stdout)")
        let clients = try topicstore(["key", "list", "--project", "alpha", "--kind", "client", "--json", "--data", data])
        let onlyClients = (try? JSONSerialization.jsonObject(with: Data(clients.stdout.utf8)) as? [String: Any])?["keys"] as? [[String: Any]] ?? []
        #expect(onlyClients.map { $0["kind"] as? String } == ["client"], "\(clients.stdout)")
        for args in [["key", "list", "--value", "x"], ["key", "add", "--project", "alpha", "--kind", "client", "--apns"],
                     ["credentials", "list", "--apns"], ["credentials", "remove", "--project", "alpha", "--fcm", "--sandbox"]] {
            #expect(try topicstore(args + ["--data", data]).status == 2, "\(args)")
        }
        let credentials = try topicstore(["credentials", "list", "--project", "beta", "--json", "--data", data])
        #expect(credentials.status == 0 && credentials.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "[]", "\(credentials.stdout)")
    }
}
