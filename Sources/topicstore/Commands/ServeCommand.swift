import AccessControl
import Delivery
import Dispatch
import Foundation
import MPushAPI
import Notifications
import TopicStore

/// `topicstore serve`: the MPush-compatible HTTP API over the store.
enum ServeCommand: Command {
    static let stopsOnSignal = true
    static let spec = CommandSpec(
        name: "serve",
        summary: "serve the MPush-compatible HTTP API (membership for apps, audiences for send services)",
        usage: "serve [--data DIR] [--listen HOST:PORT] [--config FILE] [--threads N] [--quiet] [--no-recipient-cache]",
        options: [
            .init(name: "listen", value: "HOST:PORT", help: "where to listen (default 127.0.0.1:8080; port 0 picks a free one)"),
            .init(name: "config", value: "FILE", help: "a JSON config file (flags given here win over it)"),
            .init(name: "threads", value: "N", help: "a pool of N ≥ 1 threads (default 4); 0: a thread per connection"),
            .init(name: "quiet", value: nil, help: "no access log on standard error"),
            .init(name: "no-file-check", value: nil,
                  help: "start without walking data.mdb page by page first (about 0.3 s per GB)"),
            .init(name: "no-recipient-cache", value: nil,
                  help: "stream recipients from the device table only, and keep no topic directory (saves about the table's size in memory)"),
        ],
        details: """
        On the first run (no project yet) a project `demo` is created with a fresh client key and
        server key, printed once. Manage projects and keys with `topicstore project` and
        `topicstore key`; a running server honours changes within a second.
        The server keeps a copy of the device records in memory for streaming recipients (about
        the size of the `devices` table, which `topicstore stats` lists), read when it starts.
        SIGTERM or SIGINT: stop accepting, finish and commit the requests in progress, close the store.
        A request still waiting for its commit after shutdownTimeoutSeconds (config file, default 10)
        is answered 503, and a writer still committing as long again is not waited for (exit 1).
        Delivery starts no new push or retry; pushes in flight get shutdownTimeoutSeconds to be
        answered, and the devices not finished are pushed after the next start.
        Prints `listening on http://HOST:PORT` on standard output once it accepts connections.
        If another process already listens on HOST:PORT, exits 1 with "Address already in use".
        Before it opens the store, data.mdb is walked page by page as `topicstore audit` does first
        (about 0.3 s per GB; --no-file-check skips it): a damaged file is refused (exit 4, each issue
        named by table and page), since LMDB trusts its pages and a writer on a damaged free list
        would overwrite pages in use.
        A store with a damaged record at the log's end (the last, or one of the up to 63
        before it that the next chain link is computed through) is refused (exit 4, naming
        the record): no command could be chained onto it. `topicstore audit` reports it. So is a store of
        projections without a log, as `replay --projections-only` writes (exit 1).
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        var configuration = ServerConfiguration()
        do {
            if let file = arguments.value("config") { try configuration.load(file: file) }
            if let listen = arguments.value("listen") { try configuration.setListen(listen) }
        } catch let error as ServerConfiguration.Invalid {
            throw UsageError(description: error.description)
        }
        if let data = arguments.value("data") { configuration.dataDirectory = data }
        if let threads = try arguments.integer("threads") {
            guard threads >= 0 else {
                throw UsageError(description: "--threads must be 0 (a thread per connection) or a positive number of pool threads, not \(threads)")
            }
            configuration.threads = threads
        }
        if arguments.has("quiet") { configuration.accessLog = false }

        if !arguments.has("no-file-check"), (try? TopicStore.requireExisting(directory: configuration.dataDirectory)) != nil {
            let file = try TopicStore.checkFileStructure(directory: configuration.dataDirectory, maxIssues: 20)
            guard file.isSound else {
                Console.printError("\(configuration.dataDirectory): data.mdb is damaged; not serving it (topicstore audit --file-only lists the same):")
                for issue in file.issues { Console.printError("  \(issue)") }
                if file.issueCount > file.issues.count { Console.printError("  … and \(file.issueCount - file.issues.count) more") }
                return .verificationFailed
            }
        }
        var options = TopicStore.Options()
        options.cachesRecipients = !arguments.has("no-recipient-cache")
        let store = try TopicStore(directory: configuration.dataDirectory, options: options)
        // Every write would fail on a damaged last record (exit 4) or on projections without a
        // log (replay --projections-only, exit 1): refuse to start rather than accept connections
        // only to refuse each command.
        do { try store.checkHead(); try store.requireLog() } catch { store.close(); throw error }
        let access = try AccessControl(store: store, cacheLifetime: configuration.keyCacheSeconds)
        if let demo = try access.bootstrap(project: "demo") {
            // Data loaded before the first serve belongs to projects that have no keys yet.
            let others = try ProjectCommand.deviceCounts(store).filter { $0.key != demo.project }.sorted { $0.key < $1.key }
            if arguments.json {
                Console.printJSON(["firstRun": true, "project": demo.project, "clientKey": demo.client, "serverKey": demo.server,
                                   "projectsWithoutKeys": others.map { ["project": $0.key, "devices": $0.value] as [String: Any] }])
            } else {
                print("""
                first run: created project '\(demo.project)' with these keys (shown once; only their hashes are stored):
                  client key (membership endpoints, ships in apps): \(demo.client)
                  server key (everything, keep it secret):          \(demo.server)
                """)
                for (name, devices) in others {
                    print("  the store also holds project '\(name)' (\(devices) devices) without API keys: "
                          + "topicstore project add \(name) && topicstore key add --project \(name) --kind server")
                }
            }
        } else if case let damaged = try access.check().issues, !damaged.isEmpty {
            // Serve the rest: a request with a damaged key (or a key of a damaged project) gets 503 naming it.
            for issue in damaged {
                Console.printError("warning: damaged access record \(issue); requests that need it are refused (503)")
            }
            Console.printError("warning: topicstore audit --data \(configuration.dataDirectory) reports the same")
        } else {
            // A project whose every key is revoked gets 401 for every request: say so at start.
            let keys = try access.keys(project: nil)
            for project in try access.projects() where !keys.contains(where: { $0.project == project.name && $0.revokedAt == nil }) {
                Console.printError("warning: project '\(project.name)' has no active API key, so every request for it is refused (401): "
                                   + "topicstore key add --project \(project.name) --kind server")
            }
        }

        // SIGTERM and SIGINT are blocked since main started this command: one sent while the
        // store was opening waits here, pending, and stops the server as soon as it listens.
        let stopRequested = DispatchSemaphore(value: 0)
        StopSignals.wait { _ in stopRequested.signal() }

        let server: MPushServer
        let worker: DeliveryWorker?
        do {
            let sendQueue = try SendQueue(store: store)
            if configuration.delivery.enabled {
                worker = DeliveryWorker(queue: sendQueue, credentials: try CredentialStore(store: store), configuration: configuration.delivery)
            } else {
                worker = nil
            }
            server = try MPushServer(store: store, access: access, configuration: configuration, sendQueue: sendQueue)
            // Resumes any notification a previous run left unfinished, from its durable cursor.
            worker?.start()
        } catch {
            store.close()
            throw error
        }
        let shownHost = configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host
        if arguments.json {
            Console.printJSON(["listening": "http://\(shownHost):\(server.port)", "port": Int(server.port)])
        } else {
            print("listening on http://\(shownHost):\(server.port)")
        }
        fflush(nil)

        stopRequested.wait()
        Console.printError("shutting down: finishing \(server.activeRequests) request(s) in progress")
        // Both within shutdownTimeoutSeconds, side by side: the worker starts no new push, attempt
        // or backoff, gives the pushes in flight until then and commits what is finished (the rest
        // is pushed after the next start), while the HTTP server drains its requests.
        worker?.beginStop(grace: configuration.shutdownTimeout)
        server.shutdown()
        worker?.stop(grace: configuration.shutdownTimeout)
        // The HTTP requests are all answered by now (503 for one still waiting at the timeout);
        // the writer gets as long again to commit what it holds, and is not waited for past it.
        guard store.close(waitingAtMost: configuration.shutdownTimeout) else {
            Console.printError("stopped without the writer: its commit did not end within \(configuration.shutdownTimeout) s "
                + "(shutdownTimeoutSeconds); the commands it held were answered 503 and may or may not be committed; "
                + "every command answered 200 is committed")
            return .failure
        }
        Console.printError("stopped; every acknowledged command is committed")
        return .success
    }
}
