import Foundation
import Testing

/// `topicstore credentials set|list|remove` as an operator runs it: a real process on a real data directory,
/// with keys made by openssl (Tests/Fakes/make_test_pki.sh).
@Suite struct SendCommandLineTests {
    let cli = CommandLineTests()

    func json(_ text: String) -> Any? { try? JSONSerialization.jsonObject(with: Data(text.utf8)) }

    func makeKeys(_ dir: TemporaryDirectory) throws -> (p8: String, serviceAccount: String) {
        let pki = Process()
        pki.executableURL = URL(fileURLWithPath: "/bin/bash")
        pki.arguments = [FakePushServer.fakesDirectory + "/make_test_pki.sh", dir.path]
        try pki.run()
        pki.waitUntilExit()
        try #require(pki.terminationStatus == 0)
        let account: [String: Any] = ["type": "service_account", "project_id": "cli-project", "private_key_id": "k9",
                                      "private_key": try String(contentsOfFile: dir.sub("fcm.key"), encoding: .utf8),
                                      "client_email": "cli@cli-project.iam.gserviceaccount.com",
                                      "token_uri": "https://oauth2.example.test/token"]
        try JSONSerialization.data(withJSONObject: account).write(to: URL(fileURLWithPath: dir.sub("sa.json")))
        return (dir.sub("apns.p8"), dir.sub("sa.json"))
    }

    @Test func credentialsSetListRemove() throws {
        let keys = TemporaryDirectory("topicstore-keys")
        let data = TemporaryDirectory()
        let (p8, serviceAccount) = try makeKeys(keys)
        let d = ["--data", data.path]

        // Credentials belong to a store (a directory without one is refused, and
        // stays without one) and to projects that exist, as keys do.
        #expect(try cli.topicstore(["credentials", "list", "--json"] + d).status == 3)
        for project in ["demo", "shop", "x"] {
            #expect(try cli.topicstore(["project", "add", project] + d).status == 0)
        }
        // Empty to begin with.
        let empty = try cli.topicstore(["credentials", "list", "--json"] + d)
        #expect(empty.status == 0)
        #expect((json(empty.stdout) as? [Any])?.isEmpty == true, "\(empty.stdout)")
        let apns = try cli.topicstore(["credentials", "set", "--project", "demo", "--apns-key-file", p8, "--key-id", "ABC123DEFG",
                                       "--team-id", "TEAM123456", "--bundle-id", "com.example.app", "--sandbox", "--json"] + d)
        #expect(apns.status == 0, "\(apns.stderr)")
        #expect((json(apns.stdout) as? [String: Any])?["set"] as? [String] == ["apns"])
        let fcm = try cli.topicstore(["credentials", "set", "--project", "demo", "--fcm-service-account", serviceAccount] + d)
        #expect(fcm.status == 0, "\(fcm.stderr)")
        #expect(fcm.stdout.contains("set fcm credentials for project demo"))
        let other = try cli.topicstore(["credentials", "set", "--project", "shop", "--apns-key-file", p8, "--key-id", "SHOPKEY001",
                                        "--team-id", "TEAM999999", "--bundle-id", "com.example.shop", "--production"] + d)
        #expect(other.status == 0, "\(other.stderr)")

        // list (another process) sees all three, with their identifiers and never the private keys.
        let list = try cli.topicstore(["credentials", "list", "--json"] + d)
        #expect(list.status == 0)
        let rows = try #require(json(list.stdout) as? [[String: Any]])
        #expect(rows.count == 3)
        let demoAPNs = try #require(rows.first { $0["project"] as? String == "demo" && $0["provider"] as? String == "apns" })
        #expect(demoAPNs["keyID"] as? String == "ABC123DEFG" && demoAPNs["teamID"] as? String == "TEAM123456")
        #expect(demoAPNs["bundleID"] as? String == "com.example.app" && demoAPNs["environment"] as? String == "sandbox")
        let demoFCM = try #require(rows.first { $0["project"] as? String == "demo" && $0["provider"] as? String == "fcm" })
        #expect(demoFCM["projectID"] as? String == "cli-project")
        #expect(demoFCM["clientEmail"] as? String == "cli@cli-project.iam.gserviceaccount.com")
        #expect(rows.first { $0["project"] as? String == "shop" }?["environment"] as? String == "production")
        let text = try cli.topicstore(["credentials", "list"] + d)
        for output in [list.stdout, text.stdout] {
            #expect(!output.contains("PRIVATE KEY") && !output.contains("BEGIN"), "\(output)")
        }
        #expect(text.stdout.split(separator: "\n").count == 3)

        // Bad usage (2) and bad keys (5) store nothing.
        let neither = try cli.topicstore(["credentials", "set", "--project", "x", "--apns-key-file", p8, "--key-id", "K",
                                          "--team-id", "T", "--bundle-id", "B"] + d)
        #expect(neither.status == 2, "\(neither.stderr)")
        let missingIDs = try cli.topicstore(["credentials", "set", "--project", "x", "--apns-key-file", p8, "--sandbox"] + d)
        #expect(missingIDs.status == 2)
        try "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n".write(toFile: keys.sub("junk.p8"), atomically: true, encoding: .utf8)
        let junk = try cli.topicstore(["credentials", "set", "--project", "x", "--apns-key-file", keys.sub("junk.p8"), "--key-id", "ABC123DEFG",
                                       "--team-id", "TEAM123456", "--bundle-id", "B", "--sandbox"] + d)
        #expect(junk.status == 5, "\(junk.stdout) \(junk.stderr)")
        // EC keys on other curves are refused, not stored: P-384 (its refusal freed the key twice
        // and spun forever in libcrypto) and secp256k1 (256 bits, but not the P-256 that ES256 signs with).
        for curve in ["secp384r1", "secp256k1"] {
            let openssl = Process()
            openssl.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
            openssl.arguments = ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:\(curve)", "-out", keys.sub("\(curve).p8")]
            try openssl.run()
            openssl.waitUntilExit()
            try #require(openssl.terminationStatus == 0)
            let refused = try cli.topicstore(["credentials", "set", "--project", "x", "--apns-key-file", keys.sub("\(curve).p8"), "--key-id", "ABC123DEFG",
                                              "--team-id", "TEAM123456", "--bundle-id", "B", "--sandbox"] + d)
            #expect(refused.status == 5 && refused.stderr.contains("not P-256"), "\(curve): \(refused.status) \(refused.stderr)")
        }
        try #"{"type":"service_account","project_id":"p"}"#.write(toFile: keys.sub("bad-sa.json"), atomically: true, encoding: .utf8)
        let badAccount = try cli.topicstore(["credentials", "set", "--project", "x", "--fcm-service-account", keys.sub("bad-sa.json")] + d)
        #expect(badAccount.status == 5, "\(badAccount.stderr)")
        #expect(try cli.topicstore(["credentials", "set", "--project", "x"] + d).status == 2)
        #expect((json(try cli.topicstore(["credentials", "list", "--json"] + d).stdout) as? [Any])?.count == 3)

        // remove takes exactly one provider; removing what is not there changes nothing and says so
        // (as `key revoke` of a revoked key); a project that does not exist is invalid input.
        #expect(try cli.topicstore(["credentials", "remove", "--project", "demo"] + d).status == 2)
        let removed = try cli.topicstore(["credentials", "remove", "--project", "demo", "--apns"] + d)
        #expect(removed.status == 0, "\(removed.stderr)")
        #expect(removed.stdout.contains("removed apns credentials of project demo"))
        let again = try cli.topicstore(["credentials", "remove", "--project", "demo", "--apns"] + d)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout.contains("project demo has no apns credentials: nothing to remove"), "\(again.stdout)")
        let againJSON = try cli.topicstore(["credentials", "remove", "--project", "demo", "--apns", "--json"] + d)
        #expect(againJSON.status == 0)
        #expect((json(againJSON.stdout) as? NSDictionary) == ["project": "demo", "provider": "apns", "removed": false], "\(againJSON.stdout)")
        let unknown = try cli.topicstore(["credentials", "remove", "--project", "nosuch", "--fcm"] + d)
        #expect(unknown.status == 5 && unknown.stderr.contains("nosuch"), "\(unknown.status) \(unknown.stderr)")
        let after = try #require(json(try cli.topicstore(["credentials", "list", "--json"] + d).stdout) as? [[String: Any]])
        #expect(Set(after.map { "\($0["project"] as? String ?? "")/\($0["provider"] as? String ?? "")" }) == ["demo/fcm", "shop/apns"])
        let removedJSON = try cli.topicstore(["credentials", "remove", "--project", "shop", "--apns", "--json"] + d)
        #expect(removedJSON.status == 0)
        #expect((json(removedJSON.stdout) as? NSDictionary) == ["project": "shop", "provider": "apns", "removed": true], "\(removedJSON.stdout)")
        #expect(try cli.topicstore(["credentials", "frobnicate"] + d).status == 2)
    }
}
