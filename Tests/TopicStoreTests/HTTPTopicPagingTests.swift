import Foundation
import SubscriptionLog
import Testing
import TopicStore

/// `GET /v1/topics` in pages: a project with a million per-user topics must not
/// answer 75 MB at once. Every page walk is checked against the store's own list.
@Suite("HTTP topic pages")
struct HTTPTopicPagingTests {
    /// 300 devices, each on `all`, one of 7 shared topics and its own `user.N`.
    static func populated() throws -> HTTPTestServer {
        let t = try HTTPTestServer()
        var events: [Event] = []
        for n in 0..<300 {
            events.append(Event(project: "demo", body: .register(deviceID: "D\(n)", topics: [
                TopicSpec(code: "all"), TopicSpec(code: "t\(n % 7)"), TopicSpec(code: "user.\(n)", title: "User \(n)", single: true)])))
        }
        for result in t.store.submitAndWait(events) { _ = try result.get() }
        return t
    }

    static func page(_ t: HTTPTestServer, _ query: String) throws -> (codes: [String], subscribers: [String: Int], next: String?) {
        let r = try t.send("GET", "/v1/topics" + query, key: t.serverKey)
        #expect(r.status == 200, "\(query): \(r.status) \(r.text)")
        let object = try #require(r.object)
        let topics = object["topics"] as? [[String: Any]] ?? []
        var subscribers: [String: Int] = [:]
        for topic in topics { subscribers[topic["code"] as? String ?? ""] = topic["subscribers"] as? Int }
        return (topics.compactMap { $0["code"] as? String }, subscribers, object["next"] as? String)
    }

    @Test func pagesWalkEveryTopicOnceInCodeOrder() throws {
        let t = try Self.populated()
        let all = try Self.page(t, "?limit=10000")
        #expect(all.next == nil)
        #expect(all.codes.count == 1 + 7 + 300)
        #expect(all.codes == all.codes.sorted())
        #expect(all.subscribers["all"] == 300 && all.subscribers["t0"] == 43 && all.subscribers["user.299"] == 1)
        // Without a limit: the first 1,000 (all of them here).
        #expect(try Self.page(t, "").codes == all.codes)

        var walked: [String] = []
        var subscribers: [String: Int] = [:]
        var after: String?
        var pages = 0
        repeat {
            let p = try Self.page(t, "?limit=37" + (after.map { "&after=\($0)" } ?? ""))
            #expect(p.codes.count <= 37)
            if p.next != nil { #expect(p.codes.count == 37 && p.next == p.codes.last) }
            walked += p.codes
            subscribers.merge(p.subscribers) { a, _ in a }
            after = p.next
            pages += 1
        } while after != nil && pages < 100
        #expect(walked == all.codes)
        #expect(subscribers == all.subscribers)
        #expect(pages == (308 + 36) / 37)
    }

    @Test func prefixSelectsCodesThatStartWithIt() throws {
        let t = try Self.populated()
        let all = try Self.page(t, "?limit=10000").codes
        let users = try Self.page(t, "?prefix=user.1&limit=10000")
        #expect(users.codes == all.filter { $0.hasPrefix("user.1") })
        #expect(users.codes.count == 1 + 10 + 100)
        // A prefix with a limit pages within the prefix; an after before the prefix starts at it.
        let first = try Self.page(t, "?prefix=user.2&limit=5&after=a")
        #expect(first.codes == ["user.2", "user.20", "user.200", "user.201", "user.202"] && first.next == "user.202")
        let second = try Self.page(t, "?prefix=user.2&limit=5&after=user.202")
        #expect(second.codes == ["user.203", "user.204", "user.205", "user.206", "user.207"])
        #expect(try Self.page(t, "?prefix=nothing").codes.isEmpty)
    }

    @Test func badParametersAre422NamingThem() throws {
        let t = try Self.populated()
        for (query, field) in [("?limit=0", "limit"), ("?limit=10001", "limit"), ("?limit=ten", "limit"),
                               ("?prefix=a%20b", "prefix"), ("?after=caf%C3%A9", "after")] {
            let r = try t.send("GET", "/v1/topics" + query, key: t.serverKey)
            #expect(r.status == 422, "\(query): \(r.status)")
            let errors = r.object?["errors"] as? [String: Any]
            #expect(errors?[field] != nil, "\(query): \(r.text)")
        }
    }
}
