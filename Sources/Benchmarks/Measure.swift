#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Monotonic time in nanoseconds.
@inline(__always)
public func monotonicNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// Times single calls, less what reading the clock itself costs.
///
/// A sample is the time between two reads of `monotonicNanos()` around the
/// call, so it holds one read's cost as well: 20–50 ns on the benchmark's VMs
/// (clock_gettime through the vDSO), measured here as the median interval
/// between two reads back to back. That is a fifth to a third of a per-user
/// topic's count and nothing of SQLite's, and the same for every engine:
/// left in, it pulls each ratio toward 1. Calibrated when made (20,000
/// pairs, under a millisecond), so each class is timed against the clock as
/// the host runs it then.
public struct CallTimer: Sendable {
    /// The median of two back-to-back clock reads, subtracted from each sample.
    public let clockNanos: UInt64

    public init(calibrationPairs: Int = 20_000) {
        var gaps = [UInt64](repeating: 0, count: Swift.max(1, calibrationPairs))
        for i in gaps.indices {
            let t0 = monotonicNanos()
            gaps[i] = monotonicNanos() - t0
        }
        gaps.sort()
        clockNanos = gaps[gaps.count / 2]
    }

    /// How long `body` took, less `clockNanos` (0 when the call was quicker than that).
    @inline(__always)
    public func time(_ body: () throws -> Void) rethrows -> UInt64 {
        let t0 = monotonicNanos()
        try body()
        let elapsed = monotonicNanos() - t0
        return elapsed > clockNanos ? elapsed - clockNanos : 0
    }
}

/// Latency samples of one query class, in nanoseconds (each less the clock's
/// own read, `CallTimer`).
public struct LatencySamples: Sendable, Hashable {
    public private(set) var nanos: [UInt64] = []
    /// The clock reads subtracted from the samples (`CallTimer.clockNanos`), lowest to highest.
    public private(set) var clockNanos: ClosedRange<UInt64>?
    public init() {}
    public mutating func add(_ ns: UInt64) { nanos.append(ns) }
    public mutating func add(contentsOf other: LatencySamples) {
        nanos.append(contentsOf: other.nanos)
        if let theirs = other.clockNanos { note(clock: theirs) }
    }
    /// Notes the clock reads `timer` subtracts from the samples added with it.
    public mutating func note(_ timer: CallTimer) { note(clock: timer.clockNanos...timer.clockNanos) }
    private mutating func note(clock: ClosedRange<UInt64>) {
        clockNanos = clockNanos.map { Swift.min($0.lowerBound, clock.lowerBound)...Swift.max($0.upperBound, clock.upperBound) } ?? clock
    }
    public var count: Int { nanos.count }

    /// The `p`-quantile (0…1), nearest-rank; 0 without samples.
    public func quantile(_ p: Double) -> Double {
        guard !nanos.isEmpty else { return 0 }
        let sorted = nanos.sorted()
        let rank = Swift.max(1, Int((p * Double(sorted.count)).rounded(.up)))
        return Double(sorted[Swift.min(rank, sorted.count) - 1])
    }
    public var p50: Double { quantile(0.50) }
    public var p99: Double { quantile(0.99) }
}

/// Times `body` over and over, round-robin over `queries`, until each query
/// has `repetitions` samples or `budgetSeconds` have passed (at least
/// `minimumPerQuery` samples each). One warm-up call per query is not counted.
/// Each sample leaves out the clock's own read (`CallTimer`).
public func sampleLatencies<Q>(_ queries: [Q], repetitions: Int, minimumPerQuery: Int = 3, budgetSeconds: Double,
                               _ body: (Q) throws -> Void) rethrows -> LatencySamples {
    var samples = LatencySamples()
    for q in queries { try body(q) }
    let timer = CallTimer()
    samples.note(timer)
    let deadline = monotonicNanos() + UInt64(budgetSeconds * 1e9)
    var round = 0
    while round < repetitions {
        if round >= minimumPerQuery && monotonicNanos() > deadline { break }
        for q in queries {
            samples.add(try timer.time { try body(q) })
        }
        round += 1
    }
    return samples
}

/// Process memory as the kernel reports it.
public enum ProcessMemory {
    /// Peak resident set (VmHWM) in bytes since start or the last `resetPeak`; falls back to ru_maxrss.
    public static func peakResidentBytes() -> Int {
        if let kb = statusField("VmHWM:") { return kb * 1024 }
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Int(usage.ru_maxrss) * 1024
    }

    /// Current resident set (VmRSS) in bytes.
    public static func residentBytes() -> Int { (statusField("VmRSS:") ?? 0) * 1024 }

    /// Resets the peak to the current resident set (Linux: `5` into /proc/self/clear_refs),
    /// so that each phase reports its own peak. Returns false where unsupported.
    @discardableResult
    public static func resetPeak() -> Bool {
        let fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return write(fd, "5", 1) == 1
    }

    /// Bytes written to the block device that holds `path` so far (sectors written in
    /// /proc/diskstats × 512), or nil where unknown. It counts every process's writes
    /// to that device, so it is exact only on an otherwise idle machine. (`write_bytes`
    /// of /proc/self/io is no measure of this: with large page-cache folios the kernel
    /// accounts a whole folio for each dirtied 4 KiB page — 2,000 random page writes
    /// into a 256 MiB file counted as 256 MiB there and 8 MB at the device.)
    public static func deviceWriteBytes(holding path: String) -> Int? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        let major = Int((info.st_dev >> 8) & 0xFFF) | Int((info.st_dev >> 32) & ~0xFFF)
        let minor = Int(info.st_dev & 0xFF) | Int((info.st_dev >> 12) & ~0xFF)
        guard let text = try? String(contentsOfFile: "/proc/diskstats", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") {
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            guard f.count > 9, Int(f[0]) == major, Int(f[1]) == minor, let sectors = Int(f[9]) else { continue }
            return sectors * 512
        }
        return nil
    }

    private static func statusField(_ name: String, file: String = "/proc/self/status") -> Int? {
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 8192)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        let text = String(decoding: buffer[0..<n], as: UTF8.self)
        for line in text.split(separator: "\n") where line.hasPrefix(name) {
            let digits = line.dropFirst(name.count).filter { $0.isNumber }
            return Int(digits)
        }
        return nil
    }
}

/// Bytes a directory's files take on disk, its subdirectories' included (allocated blocks, as `du` counts them),
/// and their apparent sizes.
public func diskUsage(ofDirectory path: String) -> (allocated: Int, apparent: Int) {
    guard let dir = opendir(path) else { return (0, 0) }
    defer { closedir(dir) }
    var allocated = 0, apparent = 0
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
            String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        if name == "." || name == ".." { continue }
        var st = stat()
        guard lstat(path + "/" + name, &st) == 0 else { continue }
        if (st.st_mode & S_IFMT) == S_IFREG {
            allocated += Int(st.st_blocks) * 512
            apparent += Int(st.st_size)
        } else if (st.st_mode & S_IFMT) == S_IFDIR {
            // A compacted store keeps its file in a generation's directory (and snapshots beside it).
            let inner = diskUsage(ofDirectory: path + "/" + name)
            allocated += inner.allocated
            apparent += inner.apparent
        }
    }
    return (allocated, apparent)
}
