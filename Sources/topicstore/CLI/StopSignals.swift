import Foundation

/// SIGTERM and SIGINT as a request to stop, for the commands that stop gracefully
/// (`serve`, `load`), without losing one.
///
/// `main` blocks both signals before such a command runs, while the process has
/// no other thread; every thread started afterwards inherits the mask. A signal
/// sent from then on stays pending until `wait` takes it with `sigwait`: one sent
/// while the command is still starting is handled once it is ready, rather than
/// dropped (a signal ignored while a dispatch signal source was not yet
/// registered was simply lost: 1 `serve` in 60 signalled during its start kept
/// running) or ending the process half-way.
enum StopSignals {
    static let numbers: [Int32] = [SIGTERM, SIGINT]

    private static var set: sigset_t {
        var s = sigset_t()
        sigemptyset(&s)
        for n in numbers { sigaddset(&s, n) }
        return s
    }

    /// Blocks SIGTERM and SIGINT in the calling thread (and so in the threads it starts).
    static func block() {
        var s = set
        pthread_sigmask(SIG_BLOCK, &s, nil)
    }

    /// Starts the thread that takes each SIGTERM and SIGINT, sent before or after,
    /// and calls `handler` with its number. It runs until the process exits.
    static func wait(_ handler: @escaping @Sendable (Int32) -> Void) {
        let thread = Thread {
            var s = set
            while true {
                var number: Int32 = 0
                if sigwait(&s, &number) == 0 { handler(number) }
            }
        }
        thread.name = "topicstore.signals"
        thread.start()
    }
}
