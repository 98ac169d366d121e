import EventJSON
import Projections

/// An audience count as JSON, the object `GET/POST /v1/audience/count` answers:
/// `{"android","asOfSeq","expr","ios","project","total","unknownTopics","withoutToken"}`,
/// keys sorted. Written by hand: `JSONSerialization` (sorting the keys, escaping the
/// audience's text a character at a time) was a third of the server's time for a
/// count of a list of 100 users, where the count itself was 4%. The fixed text and
/// the numbers go in as bytes: written through string interpolation, each part
/// was a String made and appended (a fifth of the server's instructions for a
/// count of one per-user topic).
enum AudienceCountJSON {
    static func encode(project: String, _ counts: AudienceCounts, expr: String) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(160 + expr.utf8.count + counts.unknownTopics.reduce(0) { $0 + $1.utf8.count + 3 })
        func literal(_ s: StaticString) { out.append(literal: s) }
        func number(_ n: Int) { DecimalText.append(n, width: 1, to: &out) }
        func decimal(_ n: UInt64) { DecimalText.append(n, width: 1, to: &out) }
        func quote(_ s: String) { JSONText.appendQuoted(s, to: &out) }
        literal("{\"android\":"); number(counts.android)
        literal(",\"asOfSeq\":"); decimal(counts.asOfSeq)
        literal(",\"expr\":"); quote(expr)
        literal(",\"ios\":"); number(counts.ios)
        literal(",\"project\":"); quote(project)
        literal(",\"total\":"); number(counts.total)
        literal(",\"unknownTopics\":[")
        for (i, code) in counts.unknownTopics.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            quote(code)
        }
        literal("],\"withoutToken\":"); number(counts.withoutToken)
        out.append(UInt8(ascii: "}"))
        return out
    }
}
