import EventJSON
import Projections

/// A project's topics as JSON, the object the HTTP API's topic list and
/// `topicstore topics --json` answer: `{"asOfSeq","next"?,"project","topics":[{"code",
/// "single","subscribers","title"}…]}`, keys sorted, topics by code; `next` (a page's
/// last code, when more follow) only on a page. Written by hand: `JSONSerialization`
/// took 22 s and 2.6 GB for a million per-user topics.
public enum TopicListJSON {
    public static func encode(project: String, asOf: UInt64, topics: [TopicInfo], next: String? = nil) -> [UInt8] {
        let sorted = topics.sorted { $0.record.code < $1.record.code }
        var out: [UInt8] = []
        out.reserveCapacity(64 + sorted.count * 80)
        func append(_ s: String) { out.append(contentsOf: s.utf8) }
        func quote(_ s: String) { JSONText.appendQuoted(s, to: &out) }
        append("{\"asOfSeq\":\(asOf),")
        if let next {
            append("\"next\":")
            quote(next)
            append(",")
        }
        append("\"project\":")
        quote(project)
        append(",\"topics\":[")
        for (i, t) in sorted.enumerated() {
            append(i == 0 ? "{\"code\":" : ",{\"code\":")
            quote(t.record.code)
            append(",\"single\":\(t.record.single),\"subscribers\":\(t.record.subscribers),\"title\":")
            quote(t.record.title)
            append("}")
        }
        append("]}")
        return out
    }
}
