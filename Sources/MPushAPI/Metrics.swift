import Foundation
import HTTPServer
import TopicStore

/// Request counters and latency histograms, rendered with the store's own
/// figures in the Prometheus text format (version 0.0.4).
final class Metrics: @unchecked Sendable {
    static let latencyBuckets: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    private struct Histogram {
        var buckets = [Int](repeating: 0, count: Metrics.latencyBuckets.count)
        var count = 0
        var sum = 0.0
    }
    private struct RequestKey: Hashable { var route: String; var status: Int }

    private let lock = NSLock()
    private var requests: [RequestKey: Int] = [:]
    private var latency: [String: Histogram] = [:]
    private let started = Date()

    func record(_ c: HTTPServer.Completion) {
        let route = c.route ?? "unmatched"
        lock.lock()
        defer { lock.unlock() }
        requests[RequestKey(route: route, status: c.status), default: 0] += 1
        var h = latency[route] ?? Histogram()
        if let i = Self.latencyBuckets.firstIndex(where: { c.duration <= $0 }) { h.buckets[i] += 1 }
        h.count += 1
        h.sum += c.duration
        latency[route] = h
    }

    /// The exposition text: HTTP figures, then the store's.
    func render(store: TopicStore, server: HTTPServer?) -> String {
        lock.lock()
        let requests = self.requests
        let latency = self.latency
        lock.unlock()
        var out = ""
        out += "# HELP topicstore_http_requests_total HTTP requests answered, by route and status.\n"
        out += "# TYPE topicstore_http_requests_total counter\n"
        for (key, n) in requests.sorted(by: { ($0.key.route, $0.key.status) < ($1.key.route, $1.key.status) }) {
            out += "topicstore_http_requests_total{route=\"\(Self.escape(key.route))\",status=\"\(key.status)\"} \(n)\n"
        }
        out += "# HELP topicstore_http_request_duration_seconds Time from request start to response sent.\n"
        out += "# TYPE topicstore_http_request_duration_seconds histogram\n"
        for (route, h) in latency.sorted(by: { $0.key < $1.key }) {
            let r = Self.escape(route)
            var cumulative = 0
            for (i, bound) in Self.latencyBuckets.enumerated() {
                cumulative += h.buckets[i]
                out += "topicstore_http_request_duration_seconds_bucket{route=\"\(r)\",le=\"\(bound)\"} \(cumulative)\n"
            }
            out += "topicstore_http_request_duration_seconds_bucket{route=\"\(r)\",le=\"+Inf\"} \(h.count)\n"
            out += "topicstore_http_request_duration_seconds_sum{route=\"\(r)\"} \(h.sum)\n"
            out += "topicstore_http_request_duration_seconds_count{route=\"\(r)\"} \(h.count)\n"
        }
        if let server {
            out += "# HELP topicstore_http_requests_in_flight Requests started and not yet answered.\n"
            out += "# TYPE topicstore_http_requests_in_flight gauge\n"
            out += "topicstore_http_requests_in_flight \(server.activeRequests)\n"
            out += "# HELP topicstore_http_connections Open HTTP connections.\n"
            out += "# TYPE topicstore_http_connections gauge\n"
            out += "topicstore_http_connections \(server.connections)\n"
        }

        let commits = store.commitCounters
        out += "# HELP topicstore_commit_batch_size Commands per group commit (one LMDB write transaction).\n"
        out += "# TYPE topicstore_commit_batch_size histogram\n"
        var cumulative = 0
        for (i, n) in commits.batchesBySize.enumerated() {
            cumulative += n
            let bound = i == commits.batchesBySize.count - 1 ? "+Inf" : String(1 << i)
            out += "topicstore_commit_batch_size_bucket{le=\"\(bound)\"} \(cumulative)\n"
        }
        if commits.batchesBySize.isEmpty { out += "topicstore_commit_batch_size_bucket{le=\"+Inf\"} 0\n" }
        out += "topicstore_commit_batch_size_sum \(commits.commands)\n"
        out += "topicstore_commit_batch_size_count \(commits.batches)\n"
        out += "# HELP topicstore_commit_duration_seconds Time of one group commit: fold, log append and fsync.\n"
        out += "# TYPE topicstore_commit_duration_seconds histogram\n"
        cumulative = 0
        for (i, n) in commits.batchesByDuration.enumerated() {
            cumulative += n
            let bound = i < CommitCounters.durationBounds.count ? "\(CommitCounters.durationBounds[i])" : "+Inf"
            out += "topicstore_commit_duration_seconds_bucket{le=\"\(bound)\"} \(cumulative)\n"
        }
        out += "topicstore_commit_duration_seconds_sum \(commits.durationSeconds)\n"
        out += "topicstore_commit_duration_seconds_count \(commits.batches)\n"
        out += "# HELP topicstore_commit_failures_total Group commits that failed as a whole (a full disk, damage); their commands got 503.\n"
        out += "# TYPE topicstore_commit_failures_total counter\n"
        out += "topicstore_commit_failures_total \(commits.failedBatches)\n"

        let info = store.environment.info()
        let lastSequence = (try? store.read { txn in try store.tables.appliedSequence(txn) }) ?? 0
        out += "# HELP topicstore_log_last_sequence Sequence of the last event in the log (and in the projections).\n"
        out += "# TYPE topicstore_log_last_sequence gauge\n"
        out += "topicstore_log_last_sequence \(lastSequence)\n"
        out += "# HELP topicstore_db_used_bytes Bytes of the LMDB map holding pages.\n"
        out += "# TYPE topicstore_db_used_bytes gauge\n"
        out += "topicstore_db_used_bytes \(info.usedBytes)\n"
        out += "# HELP topicstore_map_size_bytes Size of the LMDB memory map.\n"
        out += "# TYPE topicstore_map_size_bytes gauge\n"
        out += "topicstore_map_size_bytes \(info.mapSize)\n"
        out += "# HELP topicstore_lmdb_readers Reader slots in use.\n"
        out += "# TYPE topicstore_lmdb_readers gauge\n"
        out += "topicstore_lmdb_readers \(info.readersInUse)\n"
        if let cache = store.reader.recipientCache {
            out += "# HELP topicstore_recipient_cache_bytes Memory of the recipient cache (device records kept for streaming).\n"
            out += "# TYPE topicstore_recipient_cache_bytes gauge\n"
            out += "topicstore_recipient_cache_bytes \(cache.footprint)\n"
            out += "# HELP topicstore_recipient_cache_sequence Log sequence the recipient cache holds the device records at (0: not filled; streams then read the map).\n"
            out += "# TYPE topicstore_recipient_cache_sequence gauge\n"
            out += "topicstore_recipient_cache_sequence \(cache.heldSequence ?? 0)\n"
        }
        if let topics = store.reader.topicCache {
            out += "# HELP topicstore_topic_cache_entries Entries of the topic cache: codes audiences named, with their ids and members or slices (entries a commit dropped count until refilled; the cache starts afresh at 262,144).\n"
            out += "# TYPE topicstore_topic_cache_entries gauge\n"
            out += "topicstore_topic_cache_entries \(topics.count)\n"
        }
        out += "# HELP topicstore_uptime_seconds Seconds since the server started.\n"
        out += "# TYPE topicstore_uptime_seconds gauge\n"
        out += "topicstore_uptime_seconds \(Int(Date().timeIntervalSince(started)))\n"
        return out
    }

    static func escape(_ s: String) -> String {
        s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }
}
