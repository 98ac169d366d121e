import LMDB
import Roaring

/// The evaluation of audience expressions for one project in one snapshot:
/// each topic and platform read from its stored chunks, combined with bitmap
/// algebra. With a `window`, only the devices of those slices are read and
/// returned: a count of a large audience goes window by window (see
/// `ProjectionReader.counts(project:_:_:)`), so what it builds stays small.
struct AudienceEvaluation {
    let reader: ProjectionReader
    let pid: UInt32
    let asOf: UInt64
    /// The slices evaluated; nil: all of them.
    var window: ClosedRange<UInt16>? {
        didSet { known = nil }  // read for the window
    }
    /// Codes named that the project does not have.
    private(set) var unknown = Set<String>()
    /// Placements already looked up, when one evaluation is run window by
    /// window (nil otherwise: a send to 100 per-user topics looks each up once).
    /// A list: such an evaluation names a few topics (`ProjectionReader.mostWindowedTopics`).
    private var placed: [(code: String, placement: TopicCache.Placement?)]?
    /// Every device the project knows (within the window), once read.
    private var known: Bitmap?

    init(reader: ProjectionReader, pid: UInt32, asOf: UInt64) {
        self.reader = reader
        self.pid = pid
        self.asOf = asOf
    }

    /// From now on, looks each topic up once (to be run window by window).
    mutating func remembersPlacements() {
        if placed == nil { placed = [] }
    }

    /// The devices of `e` (within the window).
    mutating func evaluate(_ e: AudienceExpression, _ txn: borrowing Transaction) throws -> Bitmap {
        switch e {
        case .topic(let code):
            guard let placed = try placement(code, txn) else { return Bitmap() }
            return try reader.bitmap(pid, placed, txn)
        case .platform(let platform):
            return try builtIn(ProjectionTables.BuiltIn.live(platform), txn)
        case .allDevices:
            return try knownDevices(txn)
        case .or:
            // Flatten a chain of ORs into one many-way union: its topics' codes, and
            // the other operands. (Each operand kept as an expression, and its code
            // bound again from it, cost retains and releases that were ~40% of a send
            // to 100 per-user topics.)
            var codes: [String] = []
            var others: [AudienceExpression] = []
            func collect(_ e: AudienceExpression) {
                switch e {
                case .or(let a, let b): collect(a); collect(b)
                case .topic(let code): codes.append(code)
                default: others.append(e)
                }
            }
            collect(e)
            // Small topics (a send to a list of per-user topics) are read
            // straight from their chunks into one list of values, without a
            // bitmap each; a topic that does not fit is read as a bitmap. The
            // list has room for 16 values a topic (at least 1,024, at most
            // 65,536); once it is nearly full, the rest are read as bitmaps
            // without trying (a refused try costs two reads).
            let leaves = codes.count + others.count
            var gathered = GatheredMembers(limit: min(1 << 16, max(Bitmap.gatheredUnionLimit, 16 * leaves)))
            var gathering = true
            var parts: [Bitmap] = []
            for i in others.indices { parts.append(try evaluate(others[i], txn)) }
            // Topics the serving process's directory holds with their members are
            // gathered under one lock (a lock, a lookup and a retain per topic were
            // a third of a send to 100 per-user topics); the rest one by one.
            var rest = Array(codes.indices)
            if window == nil, placed == nil, let directory = reader.topicCache {
                rest = directory.gatherMembers(pid, codes: codes, asOf: asOf, into: &gathered)
            }
            for i in rest {
                guard let placed = try placement(codes[i], txn) else { continue }
                if gathering, try reader.gather(pid, placed, into: &gathered.values, txn) { continue }
                if gathered.count > gathered.values.limit - gathered.values.limit / 8 { gathering = false }
                parts.append(try reader.bitmap(pid, placed, txn))
            }
            if gathered.count > 0 { parts.append(gathered.values.bitmap()) }
            return Bitmap.union(parts)
        case .and(let a, .not(let b)), .and(.not(let b), let a):
            return try evaluate(a, txn).subtracting(try evaluate(b, txn))
        case .and(let a, let b):
            // A topic or a platform is intersected from its stored chunks, in
            // place, rather than read into a bitmap of its own first.
            let (first, leaf) = Self.isLeaf(b) || !Self.isLeaf(a) ? (a, b) : (b, a)
            var left = try evaluate(first, txn)
            if left.isEmpty {
                try lookUp(leaf, txn)
                return left
            }
            if try intersectInPlace(&left, leaf, txn) { return left }
            left.formIntersection(try evaluate(leaf, txn))
            return left
        case .not(let a):
            return try knownDevices(txn).subtracting(try evaluate(a, txn))
        }
    }

    /// A topic or a platform: what an AND can intersect from stored chunks in place.
    static func isLeaf(_ e: AudienceExpression) -> Bool {
        switch e {
        case .topic, .platform: return true
        default: return false
        }
    }

    /// Where topic `code` has its members (within the window); nil, noted as
    /// unknown, when the project has no such topic.
    mutating func placement(_ code: String, _ txn: borrowing Transaction) throws -> TopicCache.Placement? {
        let whole: TopicCache.Placement?
        if let held = placed?.first(where: { $0.code == code }) {
            whole = held.placement
        } else {
            whole = try reader.placement(pid, code: code, asOf: asOf, txn)
            placed?.append((code, whole))
        }
        guard let whole else {
            unknown.insert(code)
            return nil
        }
        guard let window else { return whole }
        switch whole {
        case .members(let tid, let members):
            return .members(tid: tid, members.filter { window.contains(PostingChunk.high($0)) })
        case .slices(let tid, let slices):
            return .slices(tid: tid, slices.filter { window.contains($0) })
        }
    }

    /// Looks up the topics of `e`, an operand left unevaluated (the other side
    /// of its AND is empty), so that its unknown codes are reported too.
    private mutating func lookUp(_ e: AudienceExpression, _ txn: borrowing Transaction) throws {
        for code in e.topicCodes { _ = try placement(code, txn) }
    }

    /// Every device the project knows (within the window), read once.
    private mutating func knownDevices(_ txn: borrowing Transaction) throws -> Bitmap {
        if let k = known { return k }
        let k = try builtIn(ProjectionTables.BuiltIn.knownDevices, txn)
        known = k
        return k
    }

    /// A built-in set (a platform's live devices, the known devices) within the window.
    private func builtIn(_ tid: UInt32, _ txn: borrowing Transaction) throws -> Bitmap {
        guard let window else { return try reader.bitmap(pid, topic: tid, txn) }
        return try PostingChunk.read(pid: pid, topic: tid, slices: window, required: false, tables: reader.tables, txn)
    }

    /// Intersects `left` with topic or platform `leaf` slice by slice, each stored
    /// chunk read in place (one of runs decoded, for its slice alone). False for a
    /// small topic held with its members, or when a slice its record lists has no
    /// chunk: `left` is then partly intersected, and intersecting it with the whole
    /// `leaf` the ordinary way (which reports the missing chunk) finishes the job.
    private mutating func intersectInPlace(_ left: inout Bitmap, _ leaf: AudienceExpression,
                                           _ txn: borrowing Transaction) throws -> Bool {
        let tid: UInt32
        var listed: [UInt16]?
        switch leaf {
        case .platform(let platform):
            tid = ProjectionTables.BuiltIn.live(platform)
        case .topic(let code):
            guard let placed = try placement(code, txn) else {
                left = Bitmap()
                return true
            }
            guard case .slices(let t, let s) = placed else { return false }
            tid = t
            listed = s
        default:
            return false
        }
        var next = 0  // into `listed`, ascending as the slices are
        for high in left.sliceKeys {
            if let l = listed {
                while next < l.count, l[next] < high { next += 1 }
                if next == l.count || l[next] != high { left.removeSlice(high); continue }
            }
            guard let stored = try Keys.withChunk(pid, tid, high, { try txn.get(reader.tables.postings, $0) }) else {
                if listed != nil { return false }
                left.removeSlice(high)
                continue
            }
            if left.formIntersection(inSlice: high, stored: stored) { continue }
            // Runs on either side, or a damaged chunk: this slice the ordinary way
            // (decoding reports the damage).
            let part = left.intersection(try PostingChunk.decode(stored, pid: pid, topic: tid, high: high))
            left.removeSlice(high)
            if !part.isEmpty { left.formUnion(part) }
        }
        return true
    }
}
