import Projections

/// The body a send service posts for the count of a list of users, in its
/// plainest shape — `{"topics":["user.1","user.2",…]}`: one key, an array of
/// strings without escapes or control characters, any JSON white space — read
/// in one pass into a `TopicCodeList` cut from the body's bytes. Any other body
/// (another key, an escape, a code given as an object) is nil, and is read as an
/// object, which gives the same list for this shape and the errors for others.
///
/// Why: read as an object, each code was made a `String` and then copied into
/// the list: a third of the server's instructions for a posted count of 100 users.
enum PostedTopicList {
    /// The list `body` (valid UTF-8) gives, or nil when it is not of the plain shape.
    static func codes(_ body: UnsafeBufferPointer<UInt8>) -> TopicCodeList? {
        var at = 0
        func skipSpace() {
            while at < body.count, body[at] == 0x20 || body[at] == 0x09 || body[at] == 0x0A || body[at] == 0x0D { at += 1 }
        }
        func take(_ byte: UInt8) -> Bool {
            skipSpace()
            guard at < body.count, body[at] == byte else { return false }
            at += 1
            return true
        }
        /// The range of the string's bytes between its quotes; `at` after its closing quote.
        func string() -> Range<Int>? {
            guard take(UInt8(ascii: "\"")) else { return nil }
            let start = at
            while at < body.count {
                let b = body[at]
                if b == UInt8(ascii: "\"") {
                    at += 1
                    return start..<at - 1
                }
                if b == UInt8(ascii: "\\") || b < 0x20 { return nil }
                at += 1
            }
            return nil
        }

        guard take(UInt8(ascii: "{")), let key = string(),
              body[key].elementsEqual("topics".utf8), take(UInt8(ascii: ":")), take(UInt8(ascii: "[")) else { return nil }
        // The codes are cut from one copy of the body, as they are found.
        var list = TopicCodeList()
        let base = list.appendBytes(UnsafeRawBufferPointer(body))
        list.reserveCodes(body.count / 8)
        if !take(UInt8(ascii: "]")) {
            repeat {
                guard let code = string() else { return nil }
                list.appendCode(base + code.lowerBound ..< base + code.upperBound)
            } while take(UInt8(ascii: ","))
            guard take(UInt8(ascii: "]")) else { return nil }
        }
        guard take(UInt8(ascii: "}")) else { return nil }
        skipSpace()
        return at == body.count ? list : nil
    }
}
