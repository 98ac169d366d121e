import SubscriptionLog

/// The audience counts of both engines asked in alternating blocks, on stores
/// holding the same commands: a ratio to SQLite taken where the machine's
/// speed is the same for both. (Each engine's own phase asks its counts minutes
/// apart from the other's, and this VM's speed has moved by 2× between two
/// such moments: both engines move with it, but not at the same time.)
extension BenchmarkRunner {
    /// Blocks each engine takes per query class, in turn with the other.
    var sideBySideBlocks: Int { config.quick ? 3 : 10 }
    /// A block ends after its share of the class's rounds, or after this many
    /// seconds (SQLite counts `all` in about a second).
    var sideBySideBlockSeconds: Double { config.quick ? 0.05 : 0.5 }

    struct SideBySideResults {
        var topicstore: [String: LatencySamples] = [:]
        var sqlite: [String: LatencySamples] = [:]
        var compared = 0
        var disagreements: [String] = []
        /// Churn commands the engine behind took so that both hold the same.
        var toppedUp = 0
        var toppedUpEngine = ""
    }

    /// Opens both stores again, brings the one whose writer committed less churn
    /// under the counts up to the other (the same commands from the same
    /// deterministic stream), checks that every answer agrees, then asks each
    /// class of `classes` in blocks alternating between the engines.
    func runSideBySide(_ classes: [QueryClass], ts: EngineResults, sql: EngineResults) throws -> SideBySideResults {
        guard var tsChurn = ts.churnAfter, var sqlChurn = sql.churnAfter else {
            throw BenchmarkError("side by side: an engine did not report where its churn stream ended")
        }
        var r = SideBySideResults()
        progress("side by side: both stores brought to the same commands")
        let engine = try TopicStoreEngine(directory: config.directory + "/topicstore", project: spec.project, mapSize: mapSize,
                                          maxBatch: Swift.max(4096, config.batchSize))
        defer { engine.close() }
        let competitor = try SQLiteCompetitor(directory: config.directory + "/sqlite")
        if tsChurn.produced < sqlChurn.produced {
            r.toppedUp = try catchUp(&tsChurn, to: sqlChurn.produced, engine.submit)
            r.toppedUpEngine = "topicstore"
        } else if sqlChurn.produced < tsChurn.produced {
            r.toppedUp = try catchUp(&sqlChurn, to: tsChurn.produced, competitor.apply)
            r.toppedUpEngine = "SQLite"
        }
        let reader = try competitor.openReader()

        for c in classes {
            for q in c.queries {
                let prepared = try PreparedQuery(q)
                let (a, b) = (try engine.counts(prepared), try reader.counts(prepared))
                r.compared += 1
                if a != b { r.disagreements.append("side by side, \(q): topicstore \(a); SQLite \(b)") }
            }
        }

        progress("side by side: audience counts, the engines in alternating blocks")
        for c in classes {
            let prepared = try c.queries.map(PreparedQuery.init)  // parsed before the clock runs
            let rounds = Swift.max(1, c.repetitions / sideBySideBlocks)
            var mine = LatencySamples(), theirs = LatencySamples()
            for q in prepared { _ = try engine.counts(q); _ = try reader.counts(q) }  // one warm-up round each
            for _ in 0..<sideBySideBlocks {
                try block(prepared, rounds: rounds, into: &mine, engine.counts)
                try block(prepared, rounds: rounds, into: &theirs, reader.counts)
            }
            r.topicstore[c.name] = mine
            r.sqlite[c.name] = theirs
        }
        return r
    }

    /// Applies the commands of `stream` until it has produced `target`, in batches;
    /// returns how many it applied.
    private func catchUp(_ stream: inout ChurnStream, to target: Int, _ apply: ([Event]) throws -> Void) throws -> Int {
        var events: [Event] = []
        var applied = 0
        while stream.produced < target {
            events.removeAll(keepingCapacity: true)
            let n = Swift.min(config.batchSize, target - stream.produced)
            _ = stream.next(commands: n, into: &events)
            try apply(events)
            applied += n
        }
        return applied
    }

    /// One engine's block: `rounds` timed rounds of `queries`, fewer when
    /// `sideBySideBlockSeconds` have passed (at least one). No warm-up: what the
    /// other engine's block left in the CPU's caches is part of the figure.
    private func block(_ queries: [PreparedQuery], rounds: Int, into samples: inout LatencySamples,
                       _ ask: (PreparedQuery) throws -> AudienceTally) throws {
        let timer = CallTimer()
        samples.note(timer)
        let deadline = monotonicNanos() + UInt64(sideBySideBlockSeconds * 1e9)
        for round in 0..<rounds {
            if round > 0 && monotonicNanos() > deadline { break }
            for q in queries {
                samples.add(try timer.time { _ = try ask(q) })
            }
        }
    }
}
