@testable import Delivery
import Foundation
import SubscriptionLog
import Testing
import TopicStore

/// A token that moves during a send, from a device already pushed to one of the same audience
/// the walk has not reached (an app reinstalled meanwhile), is not pushed twice: a review of the
/// send path got two pushes of one notification on one phone.
@Suite(.serialized) struct SendTokenMoveTests {
    @Test func aTokenMovedDuringTheSendIsPushedOnce() throws {
        let fake = try FakePushServer()
        let devices: [(String, String, Platform)] = [("m0", "ok-ios-0", .ios), ("m1", "ok-ios-1", .ios), ("m2", "ok-and-2", .android),
                                                     ("m3", "ok-ios-3", .ios), ("m4", "ok-ios-4", .ios)]
        let (server, credentials) = try SendFailureTests.server(fake, devices: devices)
        defer { server.stop() }
        var configuration = fake.deliveryConfiguration()
        configuration.batchSize = 1  // one device per batch, in ordinal order
        let worker = DeliveryWorker(queue: server.server.sendQueue, credentials: credentials, configuration: configuration, log: { _ in })
        var batches = 0
        worker.beforeCursorCommit = {
            batches += 1
            guard batches == 1 else { return }
            // m0 has been pushed: its token moves to m3, which the walk reaches later; m1 gets a new token.
            let moves = [Event(project: "demo", body: .token(deviceID: "m3", token: "ok-ios-0", platform: .ios)),
                         Event(project: "demo", body: .token(deviceID: "m1", token: "ok-ios-new", platform: .ios))]
            for r in server.store.submitAndWait(moves) { _ = try r.get() }
        }
        worker.start()
        defer { worker.stop() }
        let id = try SendFailureTests.send(server)
        let status = try waitForCompletion(port: server.port, key: server.serverKey, id: id, timeout: 20)
        let pushes = Dictionary(grouping: fake.requests(), by: \.path).mapValues(\.count)
        // m1 with its new token (it was not pushed yet), m3 not again with m0's token, nor with the one it gave up.
        #expect(pushes["/3/device/ok-ios-0"] == 1, "\(pushes)")
        #expect(pushes["/3/device/ok-ios-new"] == 1 && pushes["/3/device/ok-ios-4"] == 1, "\(pushes)")
        #expect(pushes["/3/device/ok-ios-1"] == nil && pushes["/3/device/ok-ios-3"] == nil, "\(pushes)")
        #expect(status["sentCount"] as? Int == 4 && status["failedCount"] as? Int == 1, "\(status)")
        #expect(status["failures"] as? [String: Int] == [DeliveryWorker.pushedForAnotherDevice: 1], "\(status["failures"] ?? "")")

        // A later notification pushes m3, which holds the token now, once.
        let next = try SendFailureTests.send(server, "again")
        let second = try waitForCompletion(port: server.port, key: server.serverKey, id: next, timeout: 20)
        #expect(second["sentCount"] as? Int == 4 && second["failedCount"] as? Int == 0, "\(second)")
        let after = Dictionary(grouping: fake.requests(), by: \.path).mapValues(\.count)
        #expect(after["/3/device/ok-ios-0"] == 2, "\(after)")
    }
}
