/// Why a project or key operation was refused.
public enum AccessError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidProjectName(String, reason: String)
    case projectExists(String)
    case noSuchProject(String)
    case invalidKey(reason: String)
    case keyExists
    case noSuchKey(String)
    /// Stored bytes that do not decode (the table and key named).
    case corrupted(place: String)

    public var description: String {
        switch self {
        case .invalidProjectName(let name, let reason): return "invalid project name '\(name)': \(reason)"
        case .projectExists(let name): return "project '\(name)' already exists"
        case .noSuchProject(let name): return "no project '\(name)' (create it with: topicstore project add \(name))"
        case .invalidKey(let reason): return "invalid key: \(reason)"
        case .keyExists: return "that key is already registered"
        case .noSuchKey(let k): return "no key matches '\(k)'"
        case .corrupted(let place): return "access table entry \(place) does not decode"
        }
    }
}
