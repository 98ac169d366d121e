import AccessControl
import EventJSON
import Foundation
import TopicStore

/// Buffered writes to standard output (token streams print millions of lines).
final class OutputBuffer {
    private var buffer: [UInt8] = []
    private let fd: Int32
    init(fd: Int32 = 1) {
        self.fd = fd
        buffer.reserveCapacity(1 << 16)
    }
    deinit { flush() }

    func write(_ s: String) { buffer.append(contentsOf: s.utf8); if buffer.count >= 1 << 16 { flush() } }
    func write(bytes: [UInt8]) { buffer.append(contentsOf: bytes); if buffer.count >= 1 << 16 { flush() } }
    func write(bytes: UnsafeRawBufferPointer) { buffer.append(contentsOf: bytes); if buffer.count >= 1 << 16 { flush() } }
    func append(_ body: (inout [UInt8]) -> Void) { body(&buffer); if buffer.count >= 1 << 16 { flush() } }

    func flush() {
        var offset = 0
        while offset < buffer.count {
            let n = buffer.withUnsafeBytes { Foundation.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n <= 0 { if errno == EINTR { continue }; break }
            offset += n
        }
        buffer.removeAll(keepingCapacity: true)
    }
}

enum Console {
    static func printError(_ message: String) {
        FileHandle.standardError.write(Data(("topicstore: " + message + "\n").utf8))
    }

    /// The notice on standard error when a read names a project the store does
    /// not know: its answer is empty (exit 0, so scripts keep working), but it
    /// should not look like a project whose audience happens to be empty.
    /// Whether `project` was added (`project add`) though the projections do not name it yet:
    /// a project without devices, which reads answer empty without calling it unknown.
    /// Called outside a read transaction (access control opens its own).
    static func isRegistered(_ project: String, in store: TopicStore) -> Bool {
        ((try? AccessControl(store: store).project(named: project)) ?? nil) != nil
    }

    static func unknownProject(_ project: String) -> String {
        "no project named \(project) in this store (topicstore project list lists the projects it has)"
    }

    /// A JSON object (sorted keys) on one line.
    static func printJSON(_ object: Any) {
        print(jsonString(object))
    }

    static func jsonString(_ object: Any, pretty: Bool = false) -> String {
        var options: JSONSerialization.WritingOptions = [.sortedKeys, .withoutEscapingSlashes]
        if pretty { options.insert(.prettyPrinted) }
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: options) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }

    /// `s` in double quotes for a line of text output, escaped as a JSON string is, so one
    /// value stays on one line and reads back: `"` `\` and control characters (C0, DEL,
    /// C1), and the line and paragraph separators U+2028 and U+2029. Other text is as is.
    static func quoted(_ s: String) -> String { JSONText.quoted(s, forTextLines: true) }

    /// Whether standard error is a terminal (progress is shown only there).
    static var stderrIsTTY: Bool { isatty(2) == 1 }

    /// Whether standard output is a terminal (a listing written there needs no progress bar).
    static var stdoutIsTTY: Bool { isatty(1) == 1 }
}
