internal import CCrypto

/// SHA-256 of a key: what the store keeps instead of the key itself.
struct KeyHash: Hashable, Sendable {
    let bytes: [UInt8]

    init(key: String) {
        var out = [UInt8](repeating: 0, count: 32)
        let utf8 = Array(key.utf8)
        utf8.withUnsafeBytes { input in
            out.withUnsafeMutableBufferPointer { output in
                topicstore_sha256(input.baseAddress, input.count, output.baseAddress)
            }
        }
        bytes = out
    }

    init?(stored: UnsafeRawBufferPointer) {
        guard stored.count == 32 else { return nil }
        bytes = Array(stored)
    }

    /// The public name of a key: the first 8 bytes of its hash in hex. It is
    /// what `key list` shows and what `key revoke` accepts besides the key.
    var id: String { Self.hex(bytes.prefix(8)) }

    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
