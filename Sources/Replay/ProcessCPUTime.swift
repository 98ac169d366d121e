import Foundation

/// This process's CPU time so far, every thread's (`getrusage(RUSAGE_SELF)`): in
/// user space and in the kernel. Take it before and after what is measured.
public struct ProcessCPUTime: Sendable {
    public var user: Double
    public var kernel: Double
    public var total: Double { user + kernel }

    public static func now() -> ProcessCPUTime {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
        return ProcessCPUTime(user: seconds(usage.ru_utime), kernel: seconds(usage.ru_stime))
    }
}
