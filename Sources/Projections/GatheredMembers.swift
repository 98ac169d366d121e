import CIntrinsics
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

    /// Calls `body` with the values' memory, the reaches' (four bytes of room
    /// past `limit`), how many are gathered (which it moves on past what it
    /// stores) and the limit: a list's held members gathered in C
    /// (`topicstore_gather_held`).
    mutating func withUnsafeStorage<R>(_ body: (UnsafeMutablePointer<UInt32>, UnsafeMutablePointer<UInt8>, inout Int, Int) -> R) -> R {
        let reaches = self.reaches, limit = values.limit
        return values.withUnsafeStorage { body($0, reaches, &$1, limit) }
    }

    /// Makes the members distinct and counts them by what they reach: how
    /// many distinct members there are (`unique`), how many of them reach an
    /// iOS and an Android token by what was gathered with them (the first
    /// time a member was gathered: a member gathered twice reaches the same
    /// either time, or is not known one of them), and how many are not known
    /// (`unknown`), moved to the front of the values: count those from the
    /// recipient cache. In C (`topicstore_distinct_reaches`), through a table
    /// of twice as many slots, not a sort (sorting the 100 members of a list
    /// was a third of its count; in Swift, the table and the count by reach
    /// were 4,300 of a held list of 100's 24,400 instructions).
    mutating func distinctReaches() -> (unique: Int, ios: Int, android: Int, unknown: Int) {
        let reaches = self.reaches
        return values.withMutableValues { values in
            guard let base = values.baseAddress else { return (0, 0, 0, 0) }
            var ios = 0, android = 0, unknown = 0
            let unique = topicstore_distinct_reaches(base, reaches, values.count,
                                                     RecipientCache.Reach.ios.rawValue, RecipientCache.Reach.android.rawValue,
                                                     RecipientCache.Reach.unreachable.rawValue, &ios, &android, &unknown)
            return (unique, ios, android, unknown)
        }
    }
}
