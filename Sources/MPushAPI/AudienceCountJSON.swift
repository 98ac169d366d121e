import EventJSON
import Projections

/// An audience count as JSON, the object `GET/POST /v1/audience/count` answers:
/// `{"android","asOfSeq","expr","ios","project","total","unknownTopics","withoutToken"}`,
/// keys sorted. Written by hand: `JSONSerialization` (sorting the keys, escaping the
/// audience's text a character at a time) was a third of the server's time for a
/// count of a list of 100 users, where the count itself was 4%.
enum AudienceCountJSON {
    static func encode(project: String, _ counts: AudienceCounts, expr: String) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(160 + expr.utf8.count + counts.unknownTopics.reduce(0) { $0 + $1.utf8.count + 3 })
        func append(_ s: String) { out.append(contentsOf: s.utf8) }
        func quote(_ s: String) { JSONText.appendQuoted(s, to: &out) }
        append("{\"android\":\(counts.android),\"asOfSeq\":\(counts.asOfSeq),\"expr\":")
        quote(expr)
        append(",\"ios\":\(counts.ios),\"project\":")
        quote(project)
        append(",\"total\":\(counts.total),\"unknownTopics\":[")
        for (i, code) in counts.unknownTopics.enumerated() {
            if i > 0 { append(",") }
            quote(code)
        }
        append("],\"withoutToken\":\(counts.withoutToken)}")
        return out
    }
}
