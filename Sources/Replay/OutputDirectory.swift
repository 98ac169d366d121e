import Foundation

/// The directory a command writes a new store into (`replay --out`, `import --data`,
/// `backup --out`), remembered as it was before, so that a run that fails removes what
/// it wrote: a partial store there would pass for the one asked for.
public struct OutputDirectory: Sendable {
    public let path: String
    private let existed: Bool
    private let before: Set<String>

    public init(_ path: String) {
        self.path = path
        existed = FileManager.default.fileExists(atPath: path)
        before = Set((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? [])
    }

    /// Removes what was written since `init`: the directory itself if it was made, else the
    /// entries that were not there. Call it with the store written there closed.
    public func discardWritten() {
        let fm = FileManager.default
        if !existed { try? fm.removeItem(atPath: path); return }
        for name in (try? fm.contentsOfDirectory(atPath: path)) ?? [] where !before.contains(name) {
            try? fm.removeItem(atPath: (path as NSString).appendingPathComponent(name))
        }
    }
}
