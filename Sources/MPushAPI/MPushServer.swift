import AccessControl
import Foundation
import HTTPServer
import Notifications
import TopicStore

/// The MPush-compatible API served over a store: start it, then `shutdown()`.
///
/// It does not own the store: after `shutdown()` returns, every request that
/// was answered 200 is durable, and the caller closes the store.
public final class MPushServer: Sendable {
    private let service: MPushService
    private let http: HTTPServer
    private let configuration: ServerConfiguration
    private let accessLog: BufferedLog?

    /// Starts listening at once. `log` receives one access-log line per request
    /// (default: standard error, when `configuration.accessLog` is on).
    /// `sendQueue` is where `POST /api/send` queues notifications (opened on the store when nil);
    /// pass the one a `DeliveryWorker` watches so a send wakes it at once.
    public init(store: TopicStore, access: AccessControl, configuration: ServerConfiguration,
                sendQueue: SendQueue? = nil, log: (@Sendable (String) -> Void)? = nil) throws {
        let service = MPushService(store: store, access: access, configuration: configuration,
                                   sendQueue: try sendQueue ?? SendQueue(store: store))
        let metrics = service.metrics
        // The default sink is standard error, written in the background in large writes.
        let buffered = configuration.accessLog && log == nil ? BufferedLog() : nil
        let sink: (@Sendable (String) -> Void)? = configuration.accessLog ? (log ?? { buffered!.append($0) }) : nil
        var httpConfiguration = configuration.httpConfiguration
        httpConfiguration.refusalBeforeBody = { service.refusalBeforeBody($0) }
        let http = try HTTPServer(configuration: httpConfiguration,
                                  deferredHandler: { service.handle($0, responder: $1) },
                                  onComplete: { completion in
                                      metrics.record(completion)
                                      sink?(AccessLog.line(completion))
                                  })
        service.attach(http)
        self.accessLog = buffered
        self.service = service
        self.http = http
        self.configuration = configuration
    }

    /// The port listened on (the real one when 0 was configured).
    public var port: UInt16 { http.port }
    public var host: String { configuration.host }
    public var activeRequests: Int { http.activeRequests }
    /// The queue `POST /api/send` writes to.
    public var sendQueue: SendQueue { service.sendQueue }

    /// Graceful stop: no new connections, 503 for new requests on open ones,
    /// requests in progress run to the end (their commits included) within
    /// `configuration.shutdownTimeout`, then every connection is closed.
    public func shutdown() {
        http.shutdown(drainTimeout: configuration.shutdownTimeout)
        service.attach(nil)
        accessLog?.close()
    }

    deinit { accessLog?.close() }

    /// The Prometheus text `/metrics` serves.
    public func metricsText() -> String { service.metrics.render(store: service.store, server: http) }
}
