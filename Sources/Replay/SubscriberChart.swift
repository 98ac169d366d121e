import Foundation

/// An SVG line chart of a topic's subscriber count over time, with axes,
/// ticks, labels and a title. Large flows are reduced per horizontal pixel
/// (keeping each pixel's lowest and highest count) so the file stays small.
public enum SubscriberChart {
    public static func svg(_ flow: History.TopicFlow, width: Int = 900, height: Int = 420) -> String {
        let left = 70.0, right = 20.0, top = 40.0, bottom = 60.0
        let w = Double(width) - left - right, h = Double(height) - top - bottom
        // (time, count) steps: start at 0 before the first change, end at the scan's time.
        var steps: [(t: Int64, n: Int)] = []
        if let first = flow.points.first { steps.append((first.timestamp, first.change == 0 ? first.subscribers : 0)) }  // a flow from a compaction snapshot starts at its count
        for p in flow.points { steps.append((p.timestamp, p.subscribers)) }
        if let end = flow.asOfTime, let lastT = steps.last?.t, end > lastT { steps.append((end, steps.last!.n)) }
        var t0 = steps.first?.t ?? 0, t1 = steps.last?.t ?? 1
        if t1 <= t0 { t0 -= 500; t1 += 500 }
        let maxCount = max(1, steps.map(\.n).max() ?? 1)
        let yTop = Double(niceCeiling(maxCount))
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

        var svg = """
        <svg xmlns="http://www.w3.org/2000/svg" width="\(width)" height="\(height)" viewBox="0 0 \(width) \(height)" font-family="sans-serif" font-size="12">
        <title>Subscribers of \(escape(flow.code)) in \(escape(flow.project))</title>
        <rect width="100%" height="100%" fill="white"/>
        <text x="\(fmt(left + w / 2))" y="22" text-anchor="middle" font-size="15" font-weight="bold">Subscribers of \(escape(flow.code)) (project \(escape(flow.project)))</text>

        """
        // Axes.
        svg += "<line x1=\"\(fmt(left))\" y1=\"\(fmt(top + h))\" x2=\"\(fmt(left + w))\" y2=\"\(fmt(top + h))\" stroke=\"black\"/>\n"
        svg += "<line x1=\"\(fmt(left))\" y1=\"\(fmt(top))\" x2=\"\(fmt(left))\" y2=\"\(fmt(top + h))\" stroke=\"black\"/>\n"
        // Y ticks.
        let yStep = Int(yTop) / 5
        for i in 0...5 {
            let n = i * max(1, yStep)
            if Double(n) > yTop { break }
            let py = y(n)
            svg += "<line x1=\"\(fmt(left - 5))\" y1=\"\(fmt(py))\" x2=\"\(fmt(left + w))\" y2=\"\(fmt(py))\" stroke=\"\(i == 0 ? "black" : "#ddd")\"/>\n"
            svg += "<text x=\"\(fmt(left - 8))\" y=\"\(fmt(py + 4))\" text-anchor=\"end\">\(n)</text>\n"
        }
        // X ticks: five times.
        let spanDays = Double(t1 - t0) / 86_400_000
        for i in 0...4 {
            let t = t0 + (t1 - t0) * Int64(i) / 4
            let px = x(t)
            svg += "<line x1=\"\(fmt(px))\" y1=\"\(fmt(top + h))\" x2=\"\(fmt(px))\" y2=\"\(fmt(top + h + 5))\" stroke=\"black\"/>\n"
            svg += "<text x=\"\(fmt(px))\" y=\"\(fmt(top + h + 20))\" text-anchor=\"middle\">\(timeLabel(t, spanDays: spanDays))</text>\n"
        }
        svg += "<text x=\"\(fmt(left + w / 2))\" y=\"\(height - 12)\" text-anchor=\"middle\">time (UTC)</text>\n"
        svg += "<text transform=\"translate(16,\(fmt(top + h / 2))) rotate(-90)\" text-anchor=\"middle\">subscribers</text>\n"
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

    static func timeLabel(_ ms: Int64, spanDays: Double) -> String {
        let date = Date(timeIntervalSince1970: Double(ms) / 1000)
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = spanDays >= 2 ? "yyyy-MM-dd" : (spanDays * 24 >= 1 ? "MM-dd HH:mm" : "HH:mm:ss.SSS")
        return f.string(from: date)
    }
}
