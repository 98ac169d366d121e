import Foundation

/// One measured figure of one engine.
public struct Figure: Sendable, Hashable {
    /// The value (a rate, a byte count, or for latencies the p50 in nanoseconds).
    public var value: Double
    public var p99: Double?
    public var samples: Int?
    public init(_ value: Double, p99: Double? = nil, samples: Int? = nil) {
        self.value = value
        self.p99 = p99
        self.samples = samples
    }
    public static func latency(_ s: LatencySamples) -> Figure { Figure(s.p50, p99: s.p99, samples: s.count) }
}

/// A row of the report: the same figure for topicstore, SQLite and the LMDB limit.
public struct ReportRow: Sendable {
    public enum Kind: String, Sendable {
        /// Higher is better (per second).
        case rate
        /// Nanoseconds, lower is better; p50 and p99.
        case latency
        /// Bytes, lower is better.
        case bytes
    }
    public var name: String
    public var unit: String
    public var kind: Kind
    public var topicstore: Figure?
    public var sqlite: Figure?
    public var limit: Figure?
    public var note: String = ""

    /// How many times better topicstore is than SQLite (>1 means topicstore wins).
    public var timesSQLite: Double? {
        guard let t = topicstore?.value, let s = sqlite?.value, t > 0, s > 0 else { return nil }
        return kind == .rate ? t / s : s / t
    }

    /// topicstore as a fraction of the LMDB limit (rates), or its size relative to the limit (bytes).
    public var ofLimit: Double? {
        guard let t = topicstore?.value, let l = limit?.value, l > 0 else { return nil }
        return t / l
    }
}

/// A goal of issues 2 and 6, checked against the figures of this run.
public struct GoalCheck: Sendable {
    public var name: String
    public var target: String
    public var measured: String
    public var met: Bool
}

extension GoalCheck {
    /// The store at 10,000,000 devices (issue 6: "10M devices with 80M subscriptions: ingest
    /// completes, and the store takes at most 4 GiB on disk"), log and projections together,
    /// for a run of that many devices; nil for a run of another size, of which it says nothing.
    /// Measured on the store as an operator keeps it, after the nightly compaction (the whole
    /// log kept, in blocks), with the size right after the ingest beside it.
    public static func storeAtTenMillion(devices: Int, diskBytes: Int, afterCompaction: Int) -> GoalCheck? {
        guard devices == 10_000_000 else { return nil }
        let limit = 4 << 30
        return GoalCheck(name: "bytes on disk at 10M devices after the nightly compaction (the whole log and every projection)",
                         target: "≤ 4 GiB",
                         measured: "\(BenchmarkReport.bytes(Double(afterCompaction))) (\(BenchmarkReport.bytes(Double(diskBytes))) right after the ingest)",
                         met: afterCompaction <= limit)
    }
}

public struct BenchmarkReport: Sendable {
    public var spec: WorkloadSpec
    public var batchSize: Int
    public var rows: [ReportRow] = []
    public var goals: [GoalCheck] = []
    /// Query results compared across engines on the same data; empty when they all agree.
    public var disagreements: [String] = []
    public var comparedQueries = 0
    public var notes: [String] = []
    public var seconds: Double = 0
    public var skippedSQLite = false

    public init(spec: WorkloadSpec, batchSize: Int) {
        self.spec = spec
        self.batchSize = batchSize
    }

    public func row(_ name: String) -> ReportRow? { rows.first { $0.name == name } }

    // MARK: Text

    static func format(_ f: Figure?, _ kind: ReportRow.Kind) -> String {
        guard let f else { return "—" }
        switch kind {
        case .rate: return number(f.value) + "/s"
        case .bytes: return bytes(f.value)
        case .latency:
            return "p50 " + duration(f.value) + (f.p99.map { " · p99 " + duration($0) } ?? "")
        }
    }

    static func number(_ v: Double) -> String {
        if v >= 1e9 { return String(format: "%.2f G", v / 1e9) }
        if v >= 1e6 { return String(format: "%.2f M", v / 1e6) }
        if v >= 1e4 { return String(format: "%.1f k", v / 1e3) }
        return String(format: "%.0f", v)
    }

    static func bytes(_ v: Double) -> String {
        if v >= 1073741824 { return String(format: "%.2f GiB", v / 1073741824) }
        if v >= 1048576 { return String(format: "%.1f MiB", v / 1048576) }
        if v >= 1024 { return String(format: "%.1f KiB", v / 1024) }
        return String(format: "%.0f B", v)
    }

    static func duration(_ ns: Double) -> String {
        if ns >= 1e9 { return String(format: "%.2f s", ns / 1e9) }
        if ns >= 1e6 { return String(format: "%.2f ms", ns / 1e6) }
        if ns >= 1e3 { return String(format: "%.1f µs", ns / 1e3) }
        return String(format: "%.0f ns", ns)
    }

    static func ratio(_ r: Double?) -> String {
        guard let r else { return "—" }
        if r >= 100 { return String(format: "%.0f×", r) }
        if r >= 10 { return String(format: "%.1f×", r) }
        return String(format: "%.2f×", r)
    }

    static func percent(_ r: Double?) -> String {
        guard let r else { return "—" }
        return String(format: "%.0f%%", r * 100)
    }

    /// A Markdown table (also readable in a terminal), the goals, and the cross-check.
    public var text: String {
        var lines: [String] = []
        lines.append("topicstore bench — \(spec.devices) devices (\(Int(spec.iosShare * 100))% iOS), \(spec.topics) Zipf topics + all, "
                     + "platform and per-user topics, ~\(Int(spec.meanSubscriptionsPerDevice)) subscriptions/device, "
                     + "\(spec.churnCommands) churn commands, seed \(spec.seed), batches of \(batchSize) commands")
        lines.append("")
        lines.append("| figure | topicstore | SQLite | × SQLite | LMDB limit | of limit |")
        lines.append("|---|---|---|---|---|---|")
        for r in rows {
            let name = r.name + (r.unit.isEmpty ? "" : " (\(r.unit))")
            lines.append("| \(name) | \(Self.format(r.topicstore, r.kind)) | \(Self.format(r.sqlite, r.kind)) | "
                         + "\(Self.ratio(r.timesSQLite)) | \(Self.format(r.limit, r.kind)) | \(Self.percent(r.ofLimit)) |")
        }
        lines.append("")
        lines.append("× SQLite: how many times better topicstore is (rate ÷ rate, or SQLite p50 ÷ topicstore p50, or SQLite bytes ÷ topicstore bytes).")
        lines.append("of limit: topicstore ÷ the raw LMDB figure measured in this run.")
        let notes = rows.filter { !$0.note.isEmpty }.map { "- \($0.name): \($0.note)" } + self.notes.map { "- " + $0 }
        if !notes.isEmpty { lines.append(""); lines += notes }
        lines.append("")
        if !goals.isEmpty {
            lines.append("| goal | target | measured | |")
            lines.append("|---|---|---|---|")
            for g in goals { lines.append("| \(g.name) | \(g.target) | \(g.measured) | \(g.met ? "met" : "MISSED") |") }
            lines.append("")
        }
        if skippedSQLite {
            lines.append("SQLite skipped (--skip-sqlite): no cross-check of audience counts.")
        } else if disagreements.isEmpty {
            lines.append("Cross-check: topicstore and SQLite gave identical counts (total, ios, android) for all \(comparedQueries) audience queries on the same data.")
        } else {
            lines.append("CROSS-CHECK FAILED: \(disagreements.count) of \(comparedQueries) audience queries differ between topicstore and SQLite:")
            lines += disagreements.prefix(10).map { "  " + $0 }
        }
        lines.append(String(format: "Run time %.1f s.", seconds))
        return lines.joined(separator: "\n")
    }

    // MARK: JSON

    public var jsonObject: [String: Any] {
        func figure(_ f: Figure?, _ kind: ReportRow.Kind) -> Any {
            guard let f else { return NSNull() }
            var o: [String: Any] = [:]
            if kind == .latency {
                o["p50Nanos"] = f.value
                o["p99Nanos"] = f.p99 ?? NSNull()
                o["samples"] = f.samples ?? NSNull()
            } else {
                o["value"] = f.value
            }
            return o
        }
        return [
            "workload": ["devices": spec.devices, "seed": spec.seed, "iosShare": spec.iosShare, "topics": spec.topics,
                         "zipfExponent": spec.zipfExponent, "churnCommands": spec.churnCommands,
                         "meanSubscriptionsPerDevice": spec.meanSubscriptionsPerDevice, "batchSize": batchSize,
                         "midTopics": spec.midTopics, "expression": spec.expression],
            "rows": rows.map { r -> [String: Any] in
                ["name": r.name, "unit": r.unit, "kind": r.kind.rawValue,
                 "topicstore": figure(r.topicstore, r.kind), "sqlite": figure(r.sqlite, r.kind), "limit": figure(r.limit, r.kind),
                 "timesSQLite": r.timesSQLite ?? NSNull(), "ofLimit": r.ofLimit ?? NSNull(), "note": r.note]
            },
            "goals": goals.map { ["name": $0.name, "target": $0.target, "measured": $0.measured, "met": $0.met] },
            "crossCheck": ["compared": comparedQueries, "disagreements": disagreements, "skipped": skippedSQLite],
            "notes": notes,
            "seconds": seconds,
        ]
    }

    public var json: String {
        guard let data = try? JSONSerialization.data(withJSONObject: jsonObject, options: [.sortedKeys, .withoutEscapingSlashes]) else {
            return "{}"
        }
        return String(decoding: data, as: UTF8.self)
    }
}
