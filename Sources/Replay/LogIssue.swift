import SubscriptionLog

/// Something wrong with the log itself, located by sequence.
public struct LogIssue: Sendable, Hashable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// Sequences are missing between two records.
        case gap
        /// The log does not start at sequence 1 (and there is no snapshot to start from).
        case missingStart = "missing-start"
        /// The CRC-32C does not match the record's bytes.
        case checksum
        /// The stored chain link is not SHA-256(previous link ‖ record): this
        /// record, or one before it, was altered (with its checksum recomputed).
        case chain
        /// A version 1 record, which carries no chain link.
        case unchained
        /// Unknown version, or fields that do not decode.
        case undecodable
        /// The key is not 8 bytes, or the record names another sequence.
        case misplaced
        /// A timestamp earlier than the record before it.
        case timeWentBack = "time-went-back"
        /// The chain head differs from the one anchored outside.
        case headMismatch = "head-mismatch"
    }
    public var sequence: UInt64
    public var kind: Kind
    public var message: String
    /// The sequences a `gap` or `missing-start` stands for. The verifier locates
    /// one at the record after them, a fold that stops at it at the first of them:
    /// the range tells that both are the same problem.
    public var missing: ClosedRange<UInt64>?

    public init(sequence: UInt64, kind: Kind, message: String, missing: ClosedRange<UInt64>? = nil) {
        self.sequence = sequence
        self.kind = kind
        self.message = message
        self.missing = missing
    }

    /// Whether `other` is this problem, located by another reader.
    func isSame(as other: LogIssue) -> Bool {
        sequence == other.sequence || (missing != nil && missing == other.missing)
    }

    public var description: String { "log seq \(sequence): \(kind.rawValue): \(message)" }

    /// An entry a walk of the log found out of order (`LogEntry.problem` says
    /// how), located at the record due: a gap at its first missing sequence, a
    /// damaged key at the sequence its record states, a stray key at itself.
    init(_ entry: LogEntry) {
        let message = entry.problem ?? "in order"
        switch entry.kind {
        case .afterGap(let missing):
            self.init(sequence: missing.lowerBound, kind: missing.lowerBound == 1 ? .missingStart : .gap, message: message, missing: missing)
        case .stray:
            self.init(sequence: entry.key ?? entry.sequence, kind: .misplaced, message: message)
        case .misplaced, .inOrder:
            self.init(sequence: entry.sequence, kind: .misplaced, message: message)
        case .damagedBlock(let range):
            self.init(sequence: range.lowerBound, kind: entry.damage?.kind == .checksum ? .checksum : .undecodable, message: message)
        }
    }

    init(_ corruption: RecordCorruption) {
        let kind: Kind
        switch corruption.kind {
        case .checksum: kind = .checksum
        case .chain: kind = .chain
        case .unchained: kind = .unchained
        case .version, .format: kind = .undecodable
        }
        self.init(sequence: corruption.sequence, kind: kind,
                  message: "byte \(corruption.offset): \(corruption.reason)")
    }
}
