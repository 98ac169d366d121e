/// What a key may do. Client keys ship inside apps, so anyone can extract one:
/// they reach the membership endpoints only. Server keys reach everything.
public enum KeyKind: String, Sendable, CaseIterable, CustomStringConvertible {
    case client
    case server

    public var description: String { rawValue }

    var code: UInt8 { self == .client ? 1 : 2 }
    init?(code: UInt8) {
        switch code {
        case 1: self = .client
        case 2: self = .server
        default: return nil
        }
    }
}
