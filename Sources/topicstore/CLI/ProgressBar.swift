import Foundation
import Replay

/// A one-line progress bar on standard error (rate and ETA), drawn only on a
/// terminal and never with --json; at most ten redraws a second.
final class ProgressBar {
    private let enabled: Bool
    private var phase = ""
    private var phaseStart = Date()
    private var lastDraw = Date.distantPast
    private var drawn = false

    init(arguments: Arguments) {
        enabled = Console.stderrIsTTY && !arguments.json
    }

    func update(_ p: ReplayProgress) {
        guard enabled else { return }
        let now = Date()
        if p.phase != phase { phase = p.phase; phaseStart = now }
        guard now.timeIntervalSince(lastDraw) >= 0.1 || p.done == p.total else { return }
        lastDraw = now
        let fraction = p.total > 0 ? min(1, Double(p.done) / Double(p.total)) : 0
        let width = 30
        let filled = Int(fraction * Double(width))
        let elapsed = now.timeIntervalSince(phaseStart)
        // A rate (and an ETA) only once there is something to measure: the first draw said "0 events/s ETA 0:00".
        let measured = elapsed >= 0.5 && p.done > 0
        let rate = measured ? Double(p.done) / elapsed : 0
        let eta = rate > 0 && p.total > p.done ? Double(p.total - p.done) / rate : 0
        let unit = Self.unit(of: p.phase)
        let line = String(format: "%@ [%@%@] %3d%% %@/%@ %@ %@/s ETA %@", p.phase.padding(toLength: 8, withPad: " ", startingAt: 0),
                          String(repeating: "#", count: filled), String(repeating: ".", count: width - filled),
                          Int(fraction * 100), Self.short(Double(p.done)), Self.short(Double(p.total)),
                          measured ? Self.short(rate) : "-", unit, measured ? Self.clock(eta) : "-:--")
        FileHandle.standardError.write(Data(("\r\u{1B}[K" + line).utf8))
        drawn = true
    }

    /// What a phase counts: `import` and `load` count bytes of their input file.
    static func unit(of phase: String) -> String {
        switch phase {
        case "compare": return "entries"
        case "output": return "lines"
        case "import", "load": return "bytes"
        default: return "events"
        }
    }

    /// Clears the bar so the result prints on a clean line.
    func finish() {
        guard enabled, drawn else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[K".utf8))
        drawn = false
    }

    static func short(_ v: Double) -> String {
        switch v {
        case 1e9...: return String(format: "%.1fG", v / 1e9)
        case 1e6...: return String(format: "%.1fM", v / 1e6)
        case 1e4...: return String(format: "%.0fk", v / 1e3)
        default: return String(format: "%.0f", v)
        }
    }

    static func clock(_ seconds: Double) -> String {
        let s = Int(seconds.rounded())
        return s >= 3600 ? String(format: "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60) : String(format: "%d:%02d", s / 60, s % 60)
    }
}
