import AccessControl
import Foundation
import LMDB
import Testing
import TopicStore

/// Projects and API keys: hashed storage, kinds, rotation, revocation.
@Suite("Access control")
struct AccessControlTests {
    @Test func keysAreStoredOnlyAsHashes() throws {
        let dir = HTTPTestDirectory()
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        let access = try AccessControl(store: store)
        try access.addProject("shop")
        let (key, info) = try access.addKey(project: "shop", kind: .server)
        #expect(key.hasPrefix("tss_") && key.count == 36)
        #expect(info.id.count == 16 && info.isActive && info.kind == .server)
        // Scan every byte of the access tables: the key is nowhere.
        let db = try store.environment.openDatabases([AccessControl.keysTable], create: false)[0]
        let raw: [[UInt8]] = try store.read { txn in
            try txn.withCursor(db) { cursor in
                var all: [[UInt8]] = []
                var e = try cursor.first()
                while let (k, v) = e { all.append(Array(k)); all.append(Array(v)); e = try cursor.next() }
                return all
            }
        }
        #expect(raw.count == 2 && raw[0].count == 32)
        let keyBytes = Array(key.utf8)
        for blob in raw where blob.count >= keyBytes.count {
            for i in 0...(blob.count - keyBytes.count) { #expect(Array(blob[i..<i + keyBytes.count]) != keyBytes) }
        }
        #expect(try access.authenticate(key) == Credential(project: "shop", kind: .server, keyID: info.id))
        #expect(try access.authenticate(key + "x") == nil)
    }

    @Test func severalActiveKeysRotationAndRevocation() throws {
        let dir = HTTPTestDirectory()
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        let access = try AccessControl(store: store, cacheLifetime: 0)
        try access.addProject("app")
        let old = try access.addKey(project: "app", kind: .client)
        let new = try access.addKey(project: "app", kind: .client, value: "my-chosen-client-key-1")
        #expect(try access.authenticate(old.key)?.kind == .client)
        #expect(try access.authenticate("my-chosen-client-key-1")?.project == "app")
        // Revoke the old one by its id; the new one keeps working.
        let revoked = try access.revoke(old.info.id)
        #expect(revoked.revokedAt != nil && revoked.id == old.info.id)
        #expect(try access.authenticate(old.key) == nil)
        #expect(try access.authenticate(new.key) != nil)
        // Revoke by the key itself; again is harmless.
        #expect(try access.revoke(new.key).revokedAt != nil)
        #expect(try access.revoke(new.key).id == new.info.id)
        #expect(try access.authenticate(new.key) == nil)
        let listed = try access.keys(project: "app")
        #expect(Set(listed.map(\.id)) == [old.info.id, new.info.id] && listed.allSatisfy { !$0.isActive })
        #expect(throws: AccessError.noSuchKey("nothing-like-this")) { try access.revoke("nothing-like-this") }
        #expect(throws: AccessError.keyExists) { try access.addKey(project: "app", kind: .server, value: "my-chosen-client-key-1") }
        #expect(throws: AccessError.noSuchProject("ghost")) { try access.addKey(project: "ghost", kind: .client) }
        #expect(throws: AccessError.projectExists("app")) { try access.addProject("app") }
        #expect(throws: AccessError.self) { try access.addProject("Bad Name") }
        #expect(throws: AccessError.self) { try access.addKey(project: "app", kind: .client, value: "short") }
        #expect(throws: AccessError.self) { try access.addKey(project: "app", kind: .client, value: "has a space in it somewhere") }
        // A chosen key may not carry the prefix of the other kind (a server key reading tsc_ could be shipped in an app).
        #expect(throws: AccessError.invalidKey(reason: "a server key may not start with tsc_, the prefix of client keys")) {
            try access.addKey(project: "app", kind: .server, value: "tsc_0123456789abcdefghijklmnopqrstu")
        }
        #expect(throws: AccessError.self) { try access.addKey(project: "app", kind: .client, value: "tss_0123456789abcdefghijklmnopqrstu") }
        #expect(try access.addKey(project: "app", kind: .server, value: "tss_0123456789abcdefghijklmnopqrstu").info.kind == .server)
    }

    @Test func bootstrapOnlyOnAnEmptyStore() throws {
        let dir = HTTPTestDirectory()
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        let access = try AccessControl(store: store)
        let demo = try #require(try access.bootstrap())
        #expect(demo.project == "demo" && demo.client.hasPrefix("tsc_") && demo.server.hasPrefix("tss_") && demo.client != demo.server)
        #expect(try access.bootstrap() == nil)
        #expect(try access.projects().map(\.name) == ["demo"])
        #expect(try access.authenticate(demo.client)?.kind == .client)
        #expect(try access.authenticate(demo.server)?.kind == .server)
    }

    @Test func aRunningServerHonoursKeyChangesFromTheCommandLineWithinASecond() throws {
        let dir = HTTPTestDirectory()
        let serve = try ServeProcess(data: dir.path)
        // A new project and key, added by another process while the server runs.
        let (projectStatus, _) = try runTopicstore(["project", "add", "late", "--data", dir.path])
        #expect(projectStatus == 0)
        let (status, out) = try runTopicstore(["key", "add", "--project", "late", "--kind", "server", "--data", dir.path])
        #expect(status == 0)
        let key = out.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(key.hasPrefix("tss_"))
        func statusWith(_ key: String) throws -> Int {
            try RawHTTPClient(port: serve.port).request("GET", "/v1/topics", headers: [("X-MPush-Token", key)]).status
        }
        func secondsUntil(_ expected: Int, _ key: String) throws -> Double? {
            let start = Date()
            while Date().timeIntervalSince(start) < 3 {
                if try statusWith(key) == expected { return Date().timeIntervalSince(start) }
                usleep(20_000)
            }
            return nil
        }
        let added = try #require(try secondsUntil(200, key))
        #expect(added < 1.0)
        // The list shows it (id only), and revoking it by key is honoured within a second.
        let (_, list) = try runTopicstore(["key", "list", "--project", "late", "--data", dir.path, "--json"])
        #expect(list.contains("\"project\":\"late\"") && !list.contains(key))
        #expect(!list.contains("unknownProject"))
        // A typo'd project is named as unknown, not listed as having no keys.
        let (typoStatus, typo) = try runTopicstore(["key", "list", "--project", "lade", "--data", dir.path, "--json"])
        #expect(typoStatus == 0 && typo.contains("\"unknownProject\":true"), "\(typo)")
        let (revokeStatus, _) = try runTopicstore(["key", "revoke", key, "--data", dir.path])
        #expect(revokeStatus == 0)
        let gone = try #require(try secondsUntil(401, key))
        #expect(gone < 1.0)
        // The demo keys were never affected.
        #expect(try statusWith(try #require(serve.serverKey)) == 200)
        serve.signal(SIGTERM)
        #expect(serve.wait() == 0)
    }

    /// A project whose every key is revoked answers 401 to everyone: serve says so when it starts.
    @Test func serveWarnsOfAProjectWithNoActiveKey() throws {
        let dir = HTTPTestDirectory()
        let (added, _) = try runTopicstore(["project", "add", "shop", "--data", dir.path])
        #expect(added == 0)
        let (_, keyJSON) = try runTopicstore(["key", "add", "--project", "shop", "--kind", "server", "--data", dir.path, "--json"])
        let key = try #require((try? JSONSerialization.jsonObject(with: Data(keyJSON.utf8)) as? [String: Any])?["key"] as? String, "\(keyJSON)")
        let quiet = try runWithDeadline(["serve", "--data", dir.path, "--listen", "127.0.0.1:0", "--quiet"], seconds: 2)
        #expect(!quiet.stderr.contains("no active API key"), "\(quiet.stderr)")
        let (revoked, _) = try runTopicstore(["key", "revoke", key, "--data", dir.path])
        #expect(revoked == 0)
        let warned = try runWithDeadline(["serve", "--data", dir.path, "--listen", "127.0.0.1:0", "--quiet"], seconds: 2)
        #expect(warned.stderr.contains("warning: project 'shop' has no active API key"), "\(warned.stderr)")
    }
}
