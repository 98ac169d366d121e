import Foundation

/// A limit of requests per key: a token bucket refilled at `perSecond`
/// holding at most `burst` requests.
public struct RateLimit: Sendable, Hashable {
    public var perSecond: Double
    public var burst: Double
    public init(perSecond: Double, burst: Double) {
        self.perSecond = perSecond
        self.burst = max(1, burst)
    }
}

/// One token bucket per key id.
final class RateLimiter: @unchecked Sendable {
    private struct Bucket { var tokens: Double; var updated: UInt64 }
    private let lock = NSLock()
    private var buckets: [String: Bucket] = [:]

    enum Decision: Equatable {
        case allowed(remaining: Int)
        /// Whole seconds until one request is allowed again (at least 1).
        case limited(retryAfter: Int)
    }

    func take(key: String, limit: RateLimit, now: UInt64 = DispatchTime.now().uptimeNanoseconds) -> Decision {
        guard limit.perSecond > 0 else { return .allowed(remaining: Int.max) }
        lock.lock()
        defer { lock.unlock() }
        if buckets.count > 100_000 { buckets.removeAll() }  // bounded: stale keys simply start full again
        var b = buckets[key] ?? Bucket(tokens: limit.burst, updated: now)
        // `now` was read before the lock: another thread may have stamped a later time.
        if now > b.updated {
            b.tokens = min(limit.burst, b.tokens + Double(now - b.updated) / 1e9 * limit.perSecond)
            b.updated = now
        }
        let decision: Decision
        if b.tokens >= 1 {
            b.tokens -= 1
            decision = .allowed(remaining: Int(b.tokens))
        } else {
            decision = .limited(retryAfter: max(1, Int(((1 - b.tokens) / limit.perSecond).rounded(.up))))
        }
        buckets[key] = b
        return decision
    }
}
