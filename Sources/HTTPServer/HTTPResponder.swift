internal import CMicroHTTPD
import Foundation

/// Answers one request, exactly once, from any thread.
///
/// A handler that can answer at once calls `respond` before it returns; one
/// that waits for something (a durable commit) keeps the responder and calls
/// `respond` later, from wherever the answer arrives. Meanwhile the server does
/// not hold a thread for the request: in the thread pool the connection is
/// suspended (`MHD_suspend_connection`) and resumed by `respond`; with a thread
/// per connection, that connection's own thread waits.
public final class HTTPResponder: @unchecked Sendable {
    private enum Phase {
        /// The handler is running on the server thread.
        case handling
        /// The handler returned without an answer; the connection is suspended (or its thread waits).
        case waiting
        /// An answer is ready and not yet handed to libmicrohttpd.
        case answered(HTTPResponse)
        /// The answer was handed over.
        case sent
    }

    private let lock = NSLock()
    private var phase = Phase.handling
    private let connection: OpaquePointer
    private let core: ServerCore
    /// With a thread per connection, the connection's thread waits on this instead of suspending.
    private let answered = DispatchSemaphore(value: 0)

    init(core: ServerCore, connection: OpaquePointer) {
        self.core = core
        self.connection = connection
    }

    /// Sends `response`. Only the first call counts.
    public func respond(_ response: HTTPResponse) {
        lock.lock()
        switch phase {
        case .handling:
            phase = .answered(response)
            lock.unlock()
        case .waiting:
            phase = .answered(response)
            lock.unlock()
            core.stoppedWaiting(self)
            if core.suspends {
                MHD_resume_connection(connection)
                core.resumed()
            } else {
                answered.signal()
            }
        case .answered, .sent:
            lock.unlock()
        }
    }

    /// Called on the server thread when the handler returns: the response when
    /// there is one, or nil after the connection was suspended to wait for it.
    func handlerReturned() -> HTTPResponse? {
        lock.lock()
        if case .answered(let response) = phase {
            phase = .sent
            lock.unlock()
            return response
        }
        phase = .waiting
        core.startedWaiting(self)
        if core.suspends {
            // Still under the lock, so `respond` cannot resume before the suspension.
            core.suspended()
            MHD_suspend_connection(connection)
            lock.unlock()
            return nil
        }
        lock.unlock()
        answered.wait()
        return takeAnswer()
    }

    /// The answer, once `respond` has given one (after a resume, on the server thread).
    func takeAnswer() -> HTTPResponse? {
        lock.lock()
        defer { lock.unlock() }
        guard case .answered(let response) = phase else { return nil }
        phase = .sent
        return response
    }
}
