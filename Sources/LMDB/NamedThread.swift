import Foundation

/// Runs `body` on a new thread of its own — not the Swift cooperative pool: it
/// may hold an LMDB read transaction, or wait for another thread — with an
/// 8 MiB stack, named `name` (its first 15 bytes) in the kernel too:
/// `Thread.name` does not reach it on Linux, and so named the thread shows as
/// such in `top -H`, perf and /proc/PID/task/*/comm.
package func startThread(named name: String, _ body: @escaping @Sendable () -> Void) {
    let thread = Thread {
        try? String(decoding: name.utf8.prefix(15), as: UTF8.self)
            .write(toFile: "/proc/thread-self/comm", atomically: false, encoding: .utf8)
        body()
    }
    thread.name = "topicstore-\(name)"
    thread.stackSize = 8 << 20
    thread.start()
}
