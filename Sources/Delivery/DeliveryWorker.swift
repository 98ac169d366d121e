import Foundation
import LMDB
import Notifications
import Projections
import Roaring
import Synchronization
import SubscriptionLog
import TopicStore

/// Delivers queued notifications on `lanes` dedicated threads (never the Swift
/// cooperative pool), in batches of `batchSize` devices: each lane takes the oldest
/// notification of a project no other lane is delivering, so a project's notifications
/// go out one after the other, oldest first, and one project's slow provider, rate limit
/// or token exchange holds up only its own lane.
///
/// For each batch: read the devices of the pinned audience (ordinals from the
/// notification's cursor) from one snapshot, push to every live token over
/// HTTP/2 with bounded retries, submit the rejected tokens as token-rejected
/// events (durable), then commit the new cursor and counts in one write
/// transaction. A process killed mid-batch resumes at the last committed cursor:
/// every device gets at least one push, and only the devices of the batch in
/// flight can get a second one. A stopped worker commits the devices finished
/// from the batch's start on and leaves the cursor at the first one not finished.
public final class DeliveryWorker: @unchecked Sendable {
    public let queue: SendQueue
    public let credentials: CredentialStore
    public let configuration: DeliveryConfiguration
    /// Refusals a push may meet on connections that answered nothing (a provider that takes
    /// no stream) before it fails: refused streams were never processed, so they use no attempt.
    public static let maxRefusals = 10
    private let log: @Sendable (String) -> Void
    private let stopping = Atomic<Bool>(false)
    private let stopSignal = StopSignal()
    /// When the pushes in flight are given up (monotonic seconds), once a stop was asked.
    private let stopDeadline = Mutex<Double?>(nil)
    private let finished = DispatchGroup()
    /// The projects the lanes are delivering now (one lane per project), under `claimLock` (an
    /// NSLock, which ThreadSanitizer follows; it does not follow `Mutex`'s futex).
    private var claimed: Set<String> = []
    private let claimLock = NSLock()

    /// Pushes answered 200 since start, and the time (uptime ns) of the first answer per notification.
    public let pushesSent = Atomic<Int>(0)
    private let firstPush = Mutex<[String: UInt64]>([:])
    private let lastError = Mutex<String?>(nil)

    /// Per project, shared by the lanes (a project is on one lane at a time), under `claimLock`.
    private var buckets: [String: TokenBucket] = [:]

    /// One delivery thread's own state: its HTTP/2 connections and the providers it signs with.
    final class Lane {
        let engine: HTTP2Engine
        var apns: [String: APNsProvider] = [:]
        var fcm: [String: FCMProvider] = [:]
        init(engine: HTTP2Engine) { self.engine = engine }
    }
    /// Tests: runs after a batch's rejections are committed, before its cursor is; throwing
    /// there is a crash at that moment (the batch is read again from the durable record).
    var beforeCursorCommit: (() throws -> Void)?

    public init(queue: SendQueue, credentials: CredentialStore, configuration: DeliveryConfiguration,
                log: @escaping @Sendable (String) -> Void = { FileHandle.standardError.write(Data(($0 + "\n").utf8)) }) {
        self.queue = queue
        self.credentials = credentials
        self.configuration = configuration
        self.log = log
    }

    public func start() {
        for n in 0..<configuration.lanes {
            finished.enter()
            let t = Thread { [self] in
                self.loop()
                self.finished.leave()
            }
            t.name = "topicstore.delivery.\(n)"
            t.stackSize = 8 << 20
            t.start()
        }
    }

    /// Asks the worker to stop, and returns at once: no new push, attempt, backoff or token
    /// exchange starts; the pushes in flight get `grace` seconds to be answered. What is finished
    /// is then committed — the cursor moves no further than the first device of the batch not
    /// finished, so that device and the ones after it are pushed again after the next start.
    public func beginStop(grace: Double = 10) {
        stopDeadline.withLock { if $0 == nil { $0 = HTTP2Engine.seconds() + max(0, grace) } }
        guard !stopping.exchange(true, ordering: .sequentiallyConsistent) else { return }
        stopSignal.raise()
        for _ in 0..<configuration.lanes { queue.wake() }
    }

    /// Stops as `beginStop` does and waits until the worker has committed and ended
    /// (about `grace` seconds at most: the streams still open then are given up).
    public func stop(grace: Double = 10) {
        beginStop(grace: grace)
        finished.wait()
    }

    private var isStopping: Bool { stopping.load(ordering: .relaxed) }

    public func firstPushTime(of id: String) -> UInt64? { firstPush.withLock { $0[id] } }
    public var lastErrorMessage: String? { lastError.withLock { $0 } }

    private func loop() {
        // Spread the streams over the connections (the engine also keeps to each server's own limit).
        let perConnection = (configuration.maxInFlight + configuration.connectionsPerHost - 1) / configuration.connectionsPerHost
        let lane = Lane(engine: HTTP2Engine(caFile: configuration.caFile, connectionsPerHost: configuration.connectionsPerHost,
                                            maxConcurrentStreams: max(1, perConnection),
                                            timeoutSeconds: configuration.requestTimeoutSeconds))
        while !stopping.load(ordering: .relaxed) {
            do {
                guard let (id, project) = try claimNext() else {
                    queue.waitForWork(timeout: 1)
                    continue
                }
                defer {
                    claimLock.lock()
                    claimed.remove(project)
                    claimLock.unlock()
                }
                try deliver(id, lane)
            } catch {
                lastError.withLock { $0 = "\(error)" }
                log("topicstore delivery: error: \(error)")
                queue.waitForWork(timeout: 1)
            }
        }
    }

    /// The oldest unfinished notification of a project no lane is delivering, with its project,
    /// claimed for the calling lane; nil when there is none.
    private func claimNext() throws -> (String, String)? {
        claimLock.lock()
        defer { claimLock.unlock() }
        for id in try queue.pending() {
            guard let record = try queue.record(id: id), !claimed.contains(record.project) else { continue }
            claimed.insert(record.project)
            return (id, record.project)
        }
        return nil
    }

    // MARK: One notification

    private func deliver(_ id: String, _ lane: Lane) throws {
        guard var record = try queue.record(id: id), let pinned = try queue.audience(id: id) else {
            throw NotificationCorruption(place: "notifications/\(id)", reason: "queued but missing")
        }
        let content: NotificationContent
        do { content = try NotificationContent(payload: record.payload) } catch {
            // Checked when queued; an unreadable payload can only fail every device.
            try queue.update(id: id) { r in
                r.failedCount += r.totalDevices - r.sentCount - r.failedCount
                r.failures["payload no longer valid", default: 0] += 1
                r.cursor = nil
                r.status = .completed
            }
            return
        }
        if record.status == .queued { record = try queue.update(id: id) { $0.status = .processing } }
        let apnsBody = HTTP2Engine.SharedBody(PayloadRenderer.apnsPayload(content, messageID: id))
        let fcmData = PayloadRenderer.fcmData(content, messageID: id)
        let apnsProvider = try provider(apnsFor: record.project, lane)
        let fcmProvider = try provider(fcmFor: record.project, lane)

        var pushed = PushedTokens()
        // A device whose token changed since this time may hold a token pushed for another device
        // of the audience (its token moved during the send). Five minutes before the send was
        // queued: the audience was read before `createdAt`, and a commit can take a while.
        let changedSince = record.createdAt - 300_000
        while let cursor = record.cursor, !stopping.load(ordering: .relaxed) {
            // The next batch of ordinals, and where the one after it starts.
            var ordinals: [UInt32] = []
            var next: UInt32?
            pinned.devices.forEachBatch(from: cursor, batchSize: configuration.batchSize + 1) { batch in
                ordinals = Array(batch.prefix(configuration.batchSize))
                if batch.count > configuration.batchSize { next = batch[configuration.batchSize] }
                return false
            }
            let outcome = try sendBatch(lane: lane, id: id, project: record.project, projectID: pinned.projectID, ordinals: ordinals,
                                        recorded: record.batchRejections, finishedAhead: Set(record.finishedAhead),
                                        content: content, apnsBody: apnsBody, fcmData: fcmData,
                                        apns: apnsProvider, fcm: fcmProvider, pushed: &pushed, changedSince: changedSince)
            // Stopped mid-batch, the cursor stops at the first device not finished, which is pushed
            // again after a restart; the devices finished past it are committed with it, counted,
            // and skipped when the batch is read again (a SIGTERM repeated every push of the batch
            // after a slow one).
            let done = outcome.finishedPrefix
            let whole = done == ordinals.count
            let ahead = whole ? [] : outcome.finished(from: done)
            if !whole && done == 0 && ahead.isEmpty { break }
            let result = outcome.summary(first: done, ahead: ahead)
            // Rejections first (durable), then the cursor: a crash between the two re-sends the batch, never skips it.
            // They are recorded with the notification before they are submitted, so the batch read
            // again after such a crash counts its rejected devices as the rejections they were.
            var rejectedCount = result.rejectedBefore
            if !result.rejections.isEmpty {
                let recorded = result.rejections.map { BatchRejection(ordinal: $0.ordinal, token: $0.token, reason: $0.reason) }
                record = try queue.update(id: id) { $0.batchRejections += recorded }
                let events = result.rejections.map {
                    Event(project: record.project, body: .tokenRejected(token: $0.token, rejectedAt: $0.at, reason: $0.reason))
                }
                var submitted: [Rejection] = []
                for (r, rejection) in zip(queue.store.submitAndWait(events), result.rejections) {
                    switch r {
                    case .success: submitted.append(rejection)
                    case .failure(let e): log("topicstore delivery: token-rejected event refused: \(e)")
                    }
                }
                rejectedCount += try applied(submitted, projectID: pinned.projectID)
            }
            try beforeCursorCommit?()
            record = try queue.update(id: id) { r in
                r.sentCount += result.sent
                r.failedCount += result.failed
                for (reason, n) in result.failures { r.failures[reason, default: 0] += n }
                r.rejectedTokens += rejectedCount
                r.cursor = whole ? next : ordinals[done]
                if whole && (next == nil || ordinals.isEmpty) { r.cursor = nil; r.status = .completed }
                r.finishedAhead += ahead.map { ordinals[$0] }
                if let c = r.cursor {
                    r.batchRejections.removeAll { $0.ordinal < c }
                    r.finishedAhead.removeAll { $0 < c }
                } else {
                    r.batchRejections = []
                    r.finishedAhead = []
                }
            }
        }
    }

    private func provider(apnsFor project: String, _ lane: Lane) throws -> APNsProvider? {
        guard let c = try credentials.apns(project: project) else { lane.apns[project] = nil; return nil }
        if let p = lane.apns[project], p.credentials == c { return p }
        let p = try APNsProvider(credentials: c, configuration: configuration)
        lane.apns[project] = p
        return p
    }

    private func provider(fcmFor project: String, _ lane: Lane) throws -> FCMProvider? {
        guard let c = try credentials.fcm(project: project) else { lane.fcm[project] = nil; return nil }
        if let p = lane.fcm[project], p.credentials == c { return p }
        let p = try FCMProvider(credentials: c, configuration: configuration)
        lane.fcm[project] = p
        return p
    }

    // MARK: One batch

    struct Rejection { var ordinal: UInt32; var token: String; var at: Int64; var reason: String }
    struct BatchResult {
        var sent = 0
        var failed = 0
        var failures: [String: Int] = [:]
        /// To submit as token-rejected events.
        var rejections: [Rejection] = []
        /// Rejections already submitted before a crash (recorded in the notification), counted again here.
        var rejectedBefore = 0
    }

    /// What became of each device of a batch, by its position in the batch: not finished yet,
    /// sent, or failed with a reason (a rejection also keeps its token-rejected event).
    struct BatchOutcome {
        /// 0: not finished, 1: sent, n ≥ 2: failed with `reasons[n - 2]`, `earlier`: finished and
        /// counted before a stop (`NotificationRecord.finishedAhead`).
        private var codes: [UInt32]
        private var reasons: [String] = []
        private var reasonCodes: [String: UInt32] = [:]
        private var rejections: [Int: Rejection] = [:]
        private var rejectedBefore: Set<Int> = []
        private static let earlier = UInt32.max
        init(count: Int) { codes = Array(repeating: 0, count: count) }
        /// A device finished and counted before the worker stopped: it counts nothing here.
        mutating func finishedEarlier(_ position: Int) { codes[position] = Self.earlier }
        /// A device this batch rejected before a crash: its event is in the log already.
        mutating func rejectedBefore(_ position: Int, _ reason: String) {
            fail(position, reason)
            rejectedBefore.insert(position)
        }
        mutating func sent(_ position: Int) { codes[position] = 1 }
        mutating func fail(_ position: Int, _ reason: String) {
            if let c = reasonCodes[reason] { codes[position] = c; return }
            reasons.append(reason)
            let c = UInt32(reasons.count + 1)
            reasonCodes[reason] = c
            codes[position] = c
        }
        mutating func reject(_ position: Int, _ rejection: Rejection) {
            fail(position, rejection.reason)
            rejections[position] = rejection
        }
        /// How many devices from the start of the batch are finished: the cursor may pass these, no more.
        var finishedPrefix: Int { codes.firstIndex(of: 0) ?? codes.count }
        /// The positions from `n` on that are finished now (those finished before a stop aside).
        func finished(from n: Int) -> [Int] { (n..<codes.count).filter { codes[$0] != 0 && codes[$0] != Self.earlier } }
        /// The counts and rejections of the first `n` devices and of those at `ahead` (past `n`).
        func summary(first n: Int, ahead: [Int] = []) -> BatchResult {
            var r = BatchResult()
            var perReason = [Int](repeating: 0, count: reasons.count)
            func count(_ c: UInt32) {
                if c == 1 { r.sent += 1 } else if c >= 2 && c != Self.earlier { perReason[Int(c) - 2] += 1 }
            }
            for c in codes[..<n] { count(c) }
            for p in ahead { count(codes[p]) }
            for (i, k) in perReason.enumerated() where k > 0 { r.failures[reasons[i], default: 0] += k; r.failed += k }
            let aheadSet = Set(ahead)
            func included(_ p: Int) -> Bool { p < n || aheadSet.contains(p) }
            r.rejections = rejections.filter { included($0.key) }.sorted { $0.key < $1.key }.map(\.value)
            r.rejectedBefore = rejectedBefore.count(where: included)
            return r
        }
    }

    /// How many of the submitted rejections stopped their token: the fold ignores a rejection dated
    /// before the token was registered (a stale answer, Apple's rule), which `rejectedTokens` does not count.
    private func applied(_ rejections: [Rejection], projectID: UInt32) throws -> Int {
        guard !rejections.isEmpty else { return 0 }
        let reader = queue.store.reader
        return try queue.store.read { txn in
            try rejections.reduce(0) { n, r in
                let d = try reader.deviceRecord(projectID, ordinal: r.ordinal, txn)
                return n + (d?.state == .rejected && d?.token == r.token ? 1 : 0)
            }
        }
    }

    private struct Target { var platform: Platform; var token: String; var position: Int }

    /// The failure of a device whose token this notification already pushed for another device.
    static let pushedForAnotherDevice = "token already pushed for another device"

    private func sendBatch(lane: Lane, id: String, project: String, projectID: UInt32, ordinals: [UInt32], recorded: [BatchRejection],
                           finishedAhead: Set<UInt32>, content: NotificationContent,
                           apnsBody: HTTP2Engine.SharedBody, fcmData: [UInt8], apns: APNsProvider?, fcm: FCMProvider?,
                           pushed: inout PushedTokens, changedSince: Int64) throws -> BatchOutcome {
        var result = BatchOutcome(count: ordinals.count)
        // Tokens from one fresh snapshot: a device whose token died or moved since the audience was pinned is not pushed.
        let reader = queue.store.reader
        var targets: [Target] = []
        targets.reserveCapacity(ordinals.count)
        // A device this batch rejected before a crash is still that rejection (when its token is still the one rejected).
        let earlier = Dictionary(recorded.map { ($0.ordinal, $0) }, uniquingKeysWith: { $1 })
        try queue.store.read { txn in
            for (position, o) in ordinals.enumerated() {
                if finishedAhead.contains(o) { result.finishedEarlier(position); continue }
                let d = try reader.deviceRecord(projectID, ordinal: o, txn)
                if let d, d.state == .live, let t = d.token, let p = d.platform {
                    if d.tokenTime >= changedSince, pushed.contains(t) {
                        result.fail(position, Self.pushedForAnotherDevice)
                    } else {
                        targets.append(Target(platform: p, token: t, position: position))
                    }
                } else if let d, d.state == .rejected, let e = earlier[o], d.token == e.token {
                    result.rejectedBefore(position, e.reason)
                } else {
                    result.fail(position, "token no longer live")
                }
            }
        }
        guard !targets.isEmpty else { return result }
        let engine = lane.engine

        var apnsHeaders: HTTP2Engine.Headers?
        var fcmHeaders: HTTP2Engine.Headers?
        var apnsAuthError: String?
        var fcmAuthError: String?
        if isStopping { return result }
        // Authentication only for a platform the batch has devices of: an FCM token exchange
        // that hangs must not hold a batch of iOS devices.
        if let apns, targets.contains(where: { $0.platform == .ios }) {
            do { apnsHeaders = try apns.headers(for: content) } catch { apnsAuthError = "APNs authentication: \(error)" }
        }
        if let fcm, targets.contains(where: { $0.platform == .android }) {
            do { fcmHeaders = try headers(fcm) } catch { fcmAuthError = "\(error)" }
        }
        // A token exchange cut short by a stop is no reason to fail anyone: they are pushed after the restart.
        if isStopping { return result }
        let ttl = content.expirationAt.map { $0 - Int64(Date().timeIntervalSince1970) }
        var reauthenticated: Set<Platform> = []
        var index = 0
        // The FCM body around the token, once per batch: per push only the token is copied in.
        let fcmParts = PayloadRenderer.fcmMessageParts(data: fcmData, priority: content.priority, ttlSeconds: ttl)
        let fcmPrefix = HTTP2Engine.SharedBody(fcmParts.prefix)
        let fcmSuffix = HTTP2Engine.SharedBody(fcmParts.suffix)
        let bucket = rateBucket(project)
        let maxAttempts = configuration.maxAttempts
        var firstRecorded = false

        func request(_ i: Int) -> HTTP2Engine.Request? {
            let t = targets[i]
            switch t.platform {
            case .ios:
                guard let apns, let h = apnsHeaders else { return nil }
                return HTTP2Engine.Request(headers: h, path: .token(prefix: apns.pathPrefix, token: t.token), body: .shared(apnsBody), tag: i)
            case .android:
                guard let fcm, let h = fcmHeaders else { return nil }
                if PayloadRenderer.isPlainJSONString(t.token) {
                    return HTTP2Engine.Request(headers: h, path: .fixed(fcm.sendPath),
                                               body: .token(prefix: fcmPrefix, token: t.token, suffix: fcmSuffix), tag: i)
                }
                var message: [UInt8] = []
                PayloadRenderer.fcmMessage(token: t.token, data: fcmData, priority: content.priority, ttlSeconds: ttl, into: &message)
                return HTTP2Engine.Request(headers: h, path: .fixed(fcm.sendPath), body: .owned(message), tag: i)
            }
        }

        engine.run(maxInFlight: configuration.maxInFlight, next: {
            while index < targets.count {
                let i = index
                index += 1
                if let r = request(i) { return r }
                let p = targets[i].platform
                let reason = p == .ios ? (apnsAuthError ?? "no APNs credentials for project \(project)")
                                       : (fcmAuthError ?? "no FCM credentials for project \(project)")
                result.fail(targets[i].position, reason)
            }
            return nil
        }, gate: {
            bucket?.take() ?? 0
        }, stopAt: {
            isStopping ? stopDeadline.withLock { $0 } : nil
        }, completion: { req, response in
            let target = targets[req.tag]
            let position = target.position
            let outcome = target.platform == .ios ? APNsProvider.classify(response) : FCMProvider.classify(response)
            switch outcome {
            case .sent:
                result.sent(position)
                pushed.insert(target.token)
                pushesSent.wrappingAdd(1, ordering: .relaxed)
                // The lock and the String-keyed lookup once per batch, not once per push.
                if !firstRecorded {
                    firstRecorded = true
                    let now = DispatchTime.now().uptimeNanoseconds
                    firstPush.withLock { if $0[id] == nil { $0[id] = now } }
                }
                return .done
            case .rejected(let at, let reason):
                result.reject(position, Rejection(ordinal: ordinals[position], token: target.token, at: at, reason: reason))
                return .done
            case .failed(let reason):
                result.fail(position, reason)
                return .done
            case .retry(let after, let reason):
                guard req.attempt + 1 < maxAttempts else { result.fail(position, "\(reason) after \(maxAttempts) attempts"); return .done }
                var again = req
                again.attempt += 1
                return .retry(again, delay: delay(retry: req.attempt, after: after))
            case .refused(let reason, let afterAnswers):
                // Not an attempt: the provider never saw it. On a connection that answered others it
                // goes again at once (on a new connection); where nothing is answered, refusals back
                // off and are capped, so a provider that refuses everything still ends.
                var again = req
                guard !afterAnswers else { return .retry(again, delay: 0) }
                again.refusals += 1
                guard again.refusals < Self.maxRefusals else { result.fail(position, "\(reason) after \(again.refusals) refusals"); return .done }
                return .retry(again, delay: delay(retry: again.refusals - 1, after: nil))
            case .reauthenticate(let reason):
                guard req.attempt + 1 < maxAttempts else { result.fail(position, reason); return .done }
                var again = req
                again.attempt += 1
                if !reauthenticated.contains(target.platform) {
                    reauthenticated.insert(target.platform)
                    do {
                        if target.platform == .ios { apnsHeaders = try apns?.headers(for: content, force: true) }
                        else if let fcm { fcmHeaders = try headers(fcm, force: true) }
                    } catch {
                        // Stopping: not a failure, the retry is dropped and the device pushed after the restart.
                        if isStopping { return .retry(again, delay: 0) }
                        if target.platform == .ios { apnsHeaders = nil; apnsAuthError = "APNs authentication: \(error)" }
                        else { fcmHeaders = nil; fcmAuthError = "\(error)" }
                    }
                }
                guard let h = target.platform == .ios ? apnsHeaders : fcmHeaders else {
                    result.fail(position, (target.platform == .ios ? apnsAuthError : fcmAuthError) ?? reason)
                    return .done
                }
                again.headers = h
                return .retry(again, delay: 0)
            }
        })
        return result
    }

    /// How long to wait before retry number `n + 1` (n from 0): the provider's Retry-After when
    /// it gave one, else exponential backoff from `retryBaseSeconds` with jitter, at most `retryMaxSeconds`.
    private func delay(retry n: Int, after: Double?) -> Double {
        if let after { return min(after, configuration.retryMaxSeconds) }
        let backoff = min(configuration.retryMaxSeconds, configuration.retryBaseSeconds * pow(2, Double(n)))
        return backoff * Double.random(in: 0.5...1.0)
    }

    /// FCM request headers with an access token. The token exchange is tried again like a push:
    /// on a transport error, 429 or 5xx, with the same backoff (Retry-After honoured), `maxAttempts`
    /// tries in all; a refusal of the credentials fails at once. A stop cuts the wait short.
    private func headers(_ fcm: FCMProvider, force: Bool = false) throws -> HTTP2Engine.Headers {
        var attempt = 0
        while true {
            do { return try fcm.headers(force: force, abort: { isStopping }) } catch let error as TokenExchangeError where error.retryable {
                attempt += 1
                guard attempt < configuration.maxAttempts else { throw CredentialError("\(error) after \(attempt) attempts") }
                guard stopSignal.sleep(delay(retry: attempt - 1, after: error.retryAfter)) else { throw error }
            }
        }
    }

    private func rateBucket(_ project: String) -> TokenBucket? {
        guard configuration.ratePerSecond > 0 else { return nil }
        claimLock.lock()
        defer { claimLock.unlock() }
        if let b = buckets[project] { return b }
        let b = TokenBucket(rate: configuration.ratePerSecond, burst: max(1, configuration.rateBurst))
        buckets[project] = b
        return b
    }
}

/// Raised once, when the worker is asked to stop: `sleep` wakes at once then.
final class StopSignal: @unchecked Sendable {
    private let condition = NSCondition()
    private var raised = false
    func raise() {
        condition.lock()
        raised = true
        condition.broadcast()
        condition.unlock()
    }
    /// Sleeps `seconds`; false (at once) when the stop was raised.
    func sleep(_ seconds: Double) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date().addingTimeInterval(seconds)
        while !raised { if !condition.wait(until: deadline) { break } }
        return !raised
    }
}

/// Pushes per second for one project: `take()` is 0 when a push may go now, else the seconds to wait.
final class TokenBucket {
    let rate: Double
    let burst: Double
    private var tokens: Double
    private var stamp: Double
    init(rate: Double, burst: Double) {
        self.rate = rate
        self.burst = burst
        tokens = burst
        stamp = HTTP2Engine.seconds()
    }
    func take() -> Double {
        let now = HTTP2Engine.seconds()
        tokens = min(burst, tokens + (now - stamp) * rate)
        stamp = now
        if tokens >= 1 { tokens -= 1; return 0 }
        return (1 - tokens) / rate
    }
}
