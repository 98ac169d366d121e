import Foundation
import SubscriptionLog

/// An SVG line chart of a topic's subscriber count over time, with axes,
/// ticks, labels and a title. Large flows are reduced per horizontal pixel
/// (keeping each pixel's lowest and highest count) so the file stays small.
///
/// The margins are computed from the labels' widths (estimated per character,
/// generously: there is no font metric here), so the widest y tick label
/// clears the rotated y title and the last x tick label stays in the picture.
public enum SubscriberChart {
    static let fontSize = 12.0, titleSize = 15.0
    /// Space between a label and whatever is next to it, and around the picture.
    static let gap = 8.0, edge = 6.0

    public static func svg(_ flow: History.TopicFlow, width: Int = 900, height: Int = 420) -> String {
        // (time, count) steps: start at 0 before the first change, end at the scan's time.
        var steps: [(t: Int64, n: Int)] = []
        if let first = flow.points.first { steps.append((first.timestamp, first.change == 0 ? first.subscribers : 0)) }  // a flow from a compaction snapshot starts at its count
        for p in flow.points { steps.append((p.timestamp, p.subscribers)) }
        if let end = flow.asOfTime, let lastT = steps.last?.t, end > lastT { steps.append((end, steps.last!.n)) }
        var t0 = steps.first?.t ?? 0, t1 = steps.last?.t ?? 1
        if t1 <= t0 { t0 -= 500; t1 += 500 }
        let maxCount = max(1, steps.map(\.n).max() ?? 1)
        let yTop = Double(niceCeiling(maxCount))
        let yStep = max(1, Int(yTop) / 5)
        let yTicks = (0...5).map { $0 * yStep }.filter { Double($0) <= yTop }
        let (xTicks, xLabels) = timeTicks(from: t0, to: t1)

        // Margins from the labels: the y title (rotated, one line high), then
        // the y tick labels right-aligned against the axis; on the right, half
        // the last x tick label (it is centred on the axis' end).
        let yTitleX = edge + ascent(fontSize)
        let yLabelsWidth = yTicks.map { textWidth(grouped($0), fontSize) }.max() ?? 0
        // (A tick may sit at either end: room for half the widest label on both sides.)
        let xLabelsWidth = xLabels.map { textWidth($0, fontSize) }.max() ?? 0
        let left = max(yTitleX + descent(fontSize) + gap + yLabelsWidth + gap, xLabelsWidth / 2 + edge)
        let right = max(20.0, xLabelsWidth / 2 + edge)
        let top = 40.0, bottom = 60.0
        let w = Double(width) - left - right, h = Double(height) - top - bottom
        func x(_ t: Int64) -> Double { left + Double(t - t0) / Double(t1 - t0) * w }
        func y(_ n: Int) -> Double { top + h - Double(n) / yTop * h }

        // Reduce to at most ~2 points per pixel column while keeping the step shape.
        var path = ""
        var lastX = -1.0, lastY = 0.0
        var column = -1, colMin = 0, colMax = 0, colLast = 0
        func emit(_ px: Double, _ py: Double) {
            if path.isEmpty { path = "M\(fmt(px)),\(fmt(py))" } else {
                if py != lastY { path += " H\(fmt(px)) V\(fmt(py))" } else if px != lastX { path += " H\(fmt(px))" }
            }
            lastX = px; lastY = py
        }
        func flushColumn() {
            guard column >= 0 else { return }
            let px = left + Double(column)
            if colMin != colMax { emit(px, y(colMax)); emit(px, y(colMin)) }
            emit(px, y(colLast))
        }
        for s in steps {
            let c = Int(x(s.t) - left)
            if c != column { flushColumn(); column = c; colMin = s.n; colMax = s.n }
            colMin = min(colMin, s.n); colMax = max(colMax, s.n); colLast = s.n
        }
        flushColumn()
        if steps.count == 1 { emit(left + w, y(steps[0].n)) }

        // The title is centred on the picture; a long topic code is cut to fit (the <title> keeps it whole).
        let title = fitted(flow.code, project: flow.project, within: Double(width) - 2 * edge)
        var svg = """
        <svg xmlns="http://www.w3.org/2000/svg" width="\(width)" height="\(height)" viewBox="0 0 \(width) \(height)" font-family="sans-serif" font-size="\(fmt(fontSize))">
        <title>Subscribers of \(escape(flow.code)) in \(escape(flow.project))</title>
        <rect width="100%" height="100%" fill="white"/>
        <text x="\(fmt(Double(width) / 2))" y="22" text-anchor="middle" font-size="\(fmt(titleSize))" font-weight="bold">\(escape(title))</text>

        """
        // Axes.
        svg += "<line x1=\"\(fmt(left))\" y1=\"\(fmt(top + h))\" x2=\"\(fmt(left + w))\" y2=\"\(fmt(top + h))\" stroke=\"black\"/>\n"
        svg += "<line x1=\"\(fmt(left))\" y1=\"\(fmt(top))\" x2=\"\(fmt(left))\" y2=\"\(fmt(top + h))\" stroke=\"black\"/>\n"
        // Y ticks.
        for (i, n) in yTicks.enumerated() {
            let py = y(n)
            svg += "<line x1=\"\(fmt(left - 5))\" y1=\"\(fmt(py))\" x2=\"\(fmt(left + w))\" y2=\"\(fmt(py))\" stroke=\"\(i == 0 ? "black" : "#ddd")\"/>\n"
            svg += "<text x=\"\(fmt(left - gap))\" y=\"\(fmt(py + 4))\" text-anchor=\"end\">\(grouped(n))</text>\n"
        }
        // X ticks: round times (midnights, whole hours, minutes…), each labelled exactly.
        for (t, label) in zip(xTicks, xLabels) {
            let px = x(t)
            svg += "<line x1=\"\(fmt(px))\" y1=\"\(fmt(top + h))\" x2=\"\(fmt(px))\" y2=\"\(fmt(top + h + 5))\" stroke=\"black\"/>\n"
            svg += "<text x=\"\(fmt(px))\" y=\"\(fmt(top + h + 20))\" text-anchor=\"middle\">\(label)</text>\n"
        }
        svg += "<text x=\"\(fmt(left + w / 2))\" y=\"\(height - 12)\" text-anchor=\"middle\">time (UTC)</text>\n"
        svg += "<text transform=\"translate(\(fmt(yTitleX)),\(fmt(top + h / 2))) rotate(-90)\" text-anchor=\"middle\">subscribers</text>\n"
        if !path.isEmpty {
            svg += "<path d=\"\(path)\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\"/>\n"
        } else {
            svg += "<text x=\"\(fmt(left + w / 2))\" y=\"\(fmt(top + h / 2))\" text-anchor=\"middle\" fill=\"#888\">no subscriptions</text>\n"
        }
        svg += "</svg>\n"
        return svg
    }

    static func niceCeiling(_ n: Int) -> Int {
        var magnitude = 1
        while magnitude * 10 <= n { magnitude *= 10 }
        for m in [1, 2, 5, 10] where m * magnitude >= n { return m * magnitude }
        return 10 * magnitude
    }

    static func fmt(_ v: Double) -> String { String(format: "%.1f", v) }

    static func escape(_ s: String) -> String {
        s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }

    /// Steps between x ticks, in milliseconds: the smallest that gives at most seven ticks is taken.
    static let tickSteps: [Int64] = [1, 2, 5, 10, 20, 50, 100, 200, 500,
                                     1_000, 2_000, 5_000, 10_000, 15_000, 30_000,
                                     60_000, 120_000, 300_000, 600_000, 900_000, 1_800_000,
                                     3_600_000, 7_200_000, 10_800_000, 21_600_000, 43_200_000,
                                     86_400_000, 2 * 86_400_000, 7 * 86_400_000, 14 * 86_400_000, 28 * 86_400_000,
                                     91 * 86_400_000, 364 * 86_400_000, 728 * 86_400_000, 1820 * 86_400_000]

    /// Ticks on round times within `t0...t1` (UTC: multiples of the step since 1970, so a day
    /// step ticks at midnights), at most seven, and their labels. An auditor review found five
    /// evenly spaced instants labelled by date alone: "10-02" stood at 13:22 and 10-03 was missing.
    static func timeTicks(from t0: Int64, to t1: Int64) -> ([Int64], [String]) {
        let step = tickSteps.first { (t1 - t0) / $0 < 7 } ?? (t1 - t0) / 6 + 1
        var first = t0 / step * step
        if first < t0 { first += step }
        var ticks: [Int64] = []
        var t = first
        while t <= t1 { ticks.append(t); t += step }
        return (ticks, ticks.map { timeLabel($0, step: step, span: t1 - t0) })
    }

    /// A tick's label, as precise as its step: yyyy-MM-dd for whole days, then MM-dd HH:mm
    /// (HH:mm within a day) for minutes, HH:mm:ss for seconds, HH:mm:ss.SSS below (UTC).
    static func timeLabel(_ ms: Int64, step: Int64, span: Int64) -> String {
        let iso = Array(TimeText.iso(ms).utf8)  // YYYY-MM-DDTHH:MM:SS.mmmZ
        func part(_ r: Range<Int>) -> String { String(decoding: iso[r], as: UTF8.self) }
        if step % 86_400_000 == 0 { return part(0..<10) }
        if step % 60_000 == 0 { return span >= 86_400_000 ? part(5..<10) + " " + part(11..<16) : part(11..<16) }
        if step % 1_000 == 0 { return part(11..<19) }
        return part(11..<23)
    }

    /// `n` with thousands separated by commas: 1,000,000.
    static func grouped(_ n: Int) -> String {
        let digits = String(n.magnitude)
        var out = n < 0 ? "-" : ""
        for (i, c) in digits.enumerated() {
            if i > 0 && (digits.count - i) % 3 == 0 { out += "," }
            out.append(c)
        }
        return out
    }

    /// A label's estimated width: 0.64 em a character (sans-serif digits are
    /// about 0.56–0.64 em, most lower-case letters less), bold 0.72 em.
    static func textWidth(_ s: String, _ size: Double, bold: Bool = false) -> Double {
        Double(s.count) * size * (bold ? 0.72 : 0.64)
    }

    static func ascent(_ size: Double) -> Double { 0.8 * size }
    static func descent(_ size: Double) -> Double { 0.25 * size }

    /// The chart's title, with the topic code (then the project) cut short with … to fit `width`.
    static func fitted(_ code: String, project: String, within width: Double) -> String {
        func title(_ c: String, _ p: String) -> String { "Subscribers of \(c) (project \(p))" }
        var c = code, p = project
        while textWidth(title(c, p), titleSize, bold: true) > width {
            if c.count > 8 { c = String(c.prefix(c.count - 2)) + "…" } else if p.count > 8 { p = String(p.prefix(p.count - 2)) + "…" } else { break }
        }
        return title(c, p)
    }
}
