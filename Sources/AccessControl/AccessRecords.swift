/// A project that keys can be issued for.
public struct ProjectInfo: Sendable, Hashable {
    public var name: String
    /// Milliseconds since 1970.
    public var createdAt: Int64
}

/// A key as the operator sees it: never the key itself, which is shown once.
public struct KeyInfo: Sendable, Hashable {
    /// The first 8 bytes of the key's SHA-256, in hex.
    public var id: String
    public var project: String
    public var kind: KeyKind
    /// Milliseconds since 1970.
    public var createdAt: Int64
    public var revokedAt: Int64?
    public var isActive: Bool { revokedAt == nil }
}

/// Who a request is, once its key checks out.
public struct Credential: Sendable, Hashable {
    public var project: String
    public var kind: KeyKind
    public var keyID: String
    public init(project: String, kind: KeyKind, keyID: String) {
        self.project = project
        self.kind = kind
        self.keyID = keyID
    }
}

// Stored forms (little helpers; every value starts with a format version byte).
//   access_projects: name (UTF-8) → u8 version=1 ‖ i64be createdAt
//   access_keys:     sha256(key) (32 bytes) → u8 version=1 ‖ u8 kind ‖ i64be createdAt ‖ i64be revokedAt (0 = active) ‖ project (UTF-8)
enum AccessCodec {
    static func project(createdAt: Int64) -> [UInt8] {
        [1] + bigEndian(createdAt)
    }

    static func decodeProject(name: String, _ v: UnsafeRawBufferPointer) throws(AccessError) -> ProjectInfo {
        guard v.count == 9, v[0] == 1 else { throw AccessError.corrupted(place: "access_projects/\(name)") }
        return ProjectInfo(name: name, createdAt: readBigEndian(v, at: 1))
    }

    static func key(project: String, kind: KeyKind, createdAt: Int64, revokedAt: Int64?) -> [UInt8] {
        [1, kind.code] + bigEndian(createdAt) + bigEndian(revokedAt ?? 0) + Array(project.utf8)
    }

    static func decodeKey(id: String, _ v: UnsafeRawBufferPointer) throws(AccessError) -> KeyInfo {
        guard v.count >= 18, v[0] == 1, let kind = KeyKind(code: v[1]) else {
            throw AccessError.corrupted(place: "access_keys/\(id)")
        }
        let revoked = readBigEndian(v, at: 10)
        return KeyInfo(id: id, project: String(decoding: UnsafeRawBufferPointer(rebasing: v[18...]), as: UTF8.self),
                       kind: kind, createdAt: readBigEndian(v, at: 2), revokedAt: revoked == 0 ? nil : revoked)
    }

    /// Stored name bytes as text for a message: printable ASCII as it is, anything else as \xNN.
    static func printable(_ bytes: some Sequence<UInt8>) -> String {
        bytes.map { $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\\") ? String(UnicodeScalar($0)) : String(format: "\\x%02x", $0) }.joined()
    }

    static func bigEndian(_ n: Int64) -> [UInt8] {
        withUnsafeBytes(of: n.bigEndian) { Array($0) }
    }

    static func readBigEndian(_ v: UnsafeRawBufferPointer, at offset: Int) -> Int64 {
        Int64(bigEndian: v.loadUnaligned(fromByteOffset: offset, as: Int64.self))
    }
}
