import Roaring

/// The members of a list's topics (a send to a list of per-user topics),
/// gathered with what each reaches where the topic directory holds it: the
/// list is then counted without reading each device's cell in the recipient
/// cache (a cache miss per user of a list not asked lately, a quarter of a
/// different list's count).
///
/// It owns its memory (not copyable). The values are a `GatheredValues`, which
/// an evaluation goes on with (`values`); beside each value, at the same
/// index, one byte: a `RecipientCache.Reach` (`.ios`, `.android`,
/// `.unreachable`), or 0 where it is not known.
public struct GatheredMembers: ~Copyable {
    /// The members gathered, repeats included.
    public var values: GatheredValues
    /// One byte a value, and four more: a topic's four bytes are stored at
    /// once, and one with no member, gathered when the values are full,
    /// stores them past the last value.
    private let reaches: UnsafeMutablePointer<UInt8>

    public init(limit: Int) {
        values = GatheredValues(limit: limit)
        reaches = .allocate(capacity: max(limit, 0) + 4)
    }

    deinit { reaches.deallocate() }

    /// Members gathered so far.
    public var count: Int { values.count }

    /// Calls `body` with the members gathered.
    public func withValues<R>(_ body: (UnsafeBufferPointer<UInt32>) throws -> R) rethrows -> R {
        try values.withValues(from: 0, body)
    }

    /// Appends `members`, what they reach not known, when they fit; false, with
    /// nothing gathered, when they do not.
    mutating func append(_ members: UnsafeBufferPointer<UInt32>) -> Bool {
        let at = values.count
        guard values.append(members) else { return false }
        (reaches + at).initialize(repeating: 0, count: members.count)
        return true
    }

    /// Where members are appended for the length of one `withAppender`.
    struct Appender {
        var values: GatheredValues.Appender
        let reaches: UnsafeMutablePointer<UInt8>

        /// Appends a topic's members held in place, with what they reach (0s
        /// when not known), when they fit; false, with nothing appended, when
        /// they do not. Four bytes are stored whatever the count: those past
        /// it are overwritten by the next topic's, or never read.
        @inline(__always)
        mutating func append(_ held: InlineMembers) -> Bool {
            let at = values.gathered
            guard held.append(to: &values) else { return false }
            UnsafeMutableRawPointer(reaches + at).storeBytes(of: held.reaches, as: UInt32.self)
            return true
        }
    }

    /// Calls `body` with an appender at the members' end: what it appends is gathered.
    mutating func withAppender<R>(_ body: (inout Appender) throws -> R) rethrows -> R {
        let reaches = self.reaches
        return try values.withAppender { values in
            var appender = Appender(values: values, reaches: reaches)
            defer { values = appender.values }
            return try body(&appender)
        }
    }

    /// Moves the distinct members to the front, each with what it reaches as
    /// first gathered, in no particular order, and returns how many there
    /// are: through a table of twice as many slots, not a sort (sorting the
    /// 100 members of a list was a third of its count). A member gathered
    /// twice reaches the same either time, or is not known one of them.
    mutating func keepDistinct() -> Int {
        let reaches = self.reaches
        return values.withMutableValues { values in
            guard values.count > 1 else { return values.count }
            var bits = 4
            while 1 << bits < 2 * values.count { bits += 1 }
            let size = 1 << bits, mask = size - 1
            // Slots hold value + 1; 0 is empty (kept as 64-bit values, so any UInt32 fits).
            let table = UnsafeMutablePointer<UInt64>.allocate(capacity: size)
            defer { table.deallocate() }
            table.initialize(repeating: 0, count: size)
            var unique = 0
            for j in values.indices {
                let v = values[j]
                let key = UInt64(v) + 1
                var slot = Int(truncatingIfNeeded: (UInt64(v) &* 0x9E37_79B9_7F4A_7C15) >> UInt64(64 - bits))
                while true {
                    if table[slot] == key { break }
                    if table[slot] == 0 {
                        table[slot] = key
                        values[unique] = v
                        reaches[unique] = reaches[j]
                        unique += 1
                        break
                    }
                    slot = (slot + 1) & mask
                }
            }
            return unique
        }
    }

    /// Of the first `unique` members (after `keepDistinct`), how many reach an
    /// iOS and an Android token by what was gathered with them; those whose
    /// reach is not known are moved to the front, and `unknown` says how many
    /// (count them from the recipient cache).
    mutating func countReaches(first unique: Int) -> (ios: Int, android: Int, unknown: Int) {
        precondition(unique <= count)
        let reaches = self.reaches
        return values.withMutableValues { values in
            var ios = 0, android = 0, unknown = 0
            for j in 0..<unique {
                switch reaches[j] {
                case RecipientCache.Reach.ios.rawValue: ios += 1
                case RecipientCache.Reach.android.rawValue: android += 1
                case RecipientCache.Reach.unreachable.rawValue: continue
                default:
                    values[unknown] = values[j]
                    unknown += 1
                }
            }
            return (ios, android, unknown)
        }
    }
}
