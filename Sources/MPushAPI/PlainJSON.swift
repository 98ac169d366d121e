import Foundation

/// A reader for the plainest JSON request bodies: objects, arrays, strings
/// without escapes, `true`, `false` and `null` (`{"topics":["user.1","user.2"]}`,
/// `{"device_id":"D1","topics":[{"code":"news","title":"News","single":false}]}`).
/// Anything else (a number, an escape, a key given twice, nesting deeper than
/// `maxDepth`) is left to `JSONSerialization`: `value` returns nil and
/// `RequestBody` asks it. What it returns is what `JSONSerialization` returns
/// for the same bytes (`true` and `false` as `NSNumber`s of `Bool`, `null` as `NSNull`).
///
/// Why: `JSONSerialization` made each string through `String(bytes:encoding:)`
/// and generic metadata lookups; for a count of a list of 100 users posted as
/// JSON it was a quarter of the server's time.
enum PlainJSON {
    static let maxDepth = 8

    /// The value of `body` (valid UTF-8), or nil when it is not plain (see above) or not JSON.
    static func value(_ body: [UInt8]) -> Any? {
        body.withUnsafeBufferPointer { bytes in
            var reader = Reader(bytes: bytes)
            guard let value = reader.value(depth: 0) else { return nil }
            reader.skipSpace()
            return reader.at == bytes.count ? value : nil
        }
    }

    private struct Reader {
        let bytes: UnsafeBufferPointer<UInt8>
        var at = 0

        mutating func skipSpace() {
            while at < bytes.count, bytes[at] == 0x20 || bytes[at] == 0x09 || bytes[at] == 0x0A || bytes[at] == 0x0D { at += 1 }
        }

        /// Consumes `byte` (after any space) if it is next.
        mutating func take(_ byte: UInt8) -> Bool {
            skipSpace()
            guard at < bytes.count, bytes[at] == byte else { return false }
            at += 1
            return true
        }

        mutating func value(depth: Int) -> Any? {
            skipSpace()
            guard at < bytes.count else { return nil }
            switch bytes[at] {
            case UInt8(ascii: "\""): return string()
            case UInt8(ascii: "{"): return depth < PlainJSON.maxDepth ? object(depth: depth + 1) : nil
            case UInt8(ascii: "["): return depth < PlainJSON.maxDepth ? array(depth: depth + 1) : nil
            case UInt8(ascii: "t"): return literal("true") ? NSNumber(value: true) : nil
            case UInt8(ascii: "f"): return literal("false") ? NSNumber(value: false) : nil
            case UInt8(ascii: "n"): return literal("null") ? NSNull() : nil
            default: return nil
            }
        }

        /// Consumes `word` if the bytes at `at` spell it.
        mutating func literal(_ word: StaticString) -> Bool {
            let n = word.utf8CodeUnitCount
            guard at + n <= bytes.count,
                  UnsafeBufferPointer(start: word.utf8Start, count: n).elementsEqual(bytes[at..<(at + n)]) else { return false }
            at += n
            return true
        }

        /// A string with no escape and no control character; `at` is on its opening quote.
        mutating func string() -> String? {
            let start = at + 1
            var end = start
            while end < bytes.count {
                let b = bytes[end]
                if b == UInt8(ascii: "\"") { break }
                if b == UInt8(ascii: "\\") || b < 0x20 { return nil }
                end += 1
            }
            guard end < bytes.count else { return nil }
            at = end + 1
            // Whole characters: the body is valid UTF-8 and the quotes are ASCII.
            return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)
        }

        mutating func object(depth: Int) -> [String: Any]? {
            at += 1  // {
            var object: [String: Any] = [:]
            if take(UInt8(ascii: "}")) { return object }
            repeat {
                skipSpace()
                guard at < bytes.count, bytes[at] == UInt8(ascii: "\""), let key = string(), object[key] == nil,
                      take(UInt8(ascii: ":")), let value = value(depth: depth) else { return nil }
                object[key] = value
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "}")) ? object : nil
        }

        /// An array of strings alone (a list of topics) is kept a `[String]`:
        /// each string made an `Any`, and cast back one by one by its reader, was
        /// a fifth of the server's instructions for a count of 100 users posted
        /// as JSON. Any other array is an `[Any]`, as `JSONSerialization` makes it
        /// (a `[String]` reads as `[Any]` too, each string bridged).
        mutating func array(depth: Int) -> Any? {
            at += 1  // [
            var strings: [String] = []
            var others: [Any]? = nil
            if take(UInt8(ascii: "]")) { return strings }
            repeat {
                skipSpace()
                if others == nil, at < bytes.count, bytes[at] == UInt8(ascii: "\"") {
                    guard let string = string() else { return nil }
                    strings.append(string)
                    continue
                }
                guard let value = value(depth: depth) else { return nil }
                if others == nil { others = strings.map { $0 as Any } }
                others!.append(value)
            } while take(UInt8(ascii: ","))
            guard take(UInt8(ascii: "]")) else { return nil }
            if let others { return others }
            return strings  // (not `others ?? strings`: that makes the strings an `[Any]`)
        }
    }
}
