import EventJSON
import Projections

/// The body a send service posts for the count of a list of users, in its
/// plainest shape — `{"topics":["user.1","user.2",…]}`: one key, an array of
/// strings without escapes or control characters, any JSON white space — read
/// in one pass (`EventJSON.plainCodeList`) into a `TopicCodeList` cut from the
/// body's bytes. Any other body (another key, an escape, a code given as an
/// object) is nil, and is read as an object, which gives the same list for this
/// shape and the errors for others.
///
/// Why: read as an object, each code was made a `String` and then copied into
/// the list: a third of the server's instructions for a posted count of 100 users.
enum PostedTopicList {
    /// The list `body` (valid UTF-8) gives, or nil when it is not of the plain shape.
    static func codes(_ body: UnsafeBufferPointer<UInt8>) -> TopicCodeList? {
        // The codes are cut from one copy of the body, as they are found.
        var list = TopicCodeList()
        let base = list.appendBytes(UnsafeRawBufferPointer(body))
        list.reserveCodes(body.count / 8)
        let plain = EventJSON.plainCodeList(body) { list.appendCode(base + $0.lowerBound ..< base + $0.upperBound) }
        return plain ? list : nil
    }
}
