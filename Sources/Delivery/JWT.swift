internal import CCrypto
import Foundation
import Notifications

public struct CryptoError: Error, Sendable, CustomStringConvertible {
    public var description: String
    init(_ what: String) {
        var detail = ""
        let code = ERR_get_error()
        if code != 0 {
            var buf = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buf, buf.count)
            detail = ": " + String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        ERR_clear_error()
        description = what + detail
    }
}

/// A private key from PEM (PKCS#8 `.p8` for APNs, the service account's RSA key for FCM), signing with EVP.
public final class SigningKey: @unchecked Sendable {
    public enum Kind: Sendable { case ec, rsa }
    private let key: OpaquePointer
    public let kind: Kind

    public init(pem: String) throws {
        let bytes = Array(pem.utf8)
        // BIO_new_mem_buf does not copy: the key is read while the buffer is pinned.
        let loaded: OpaquePointer? = bytes.withUnsafeBytes { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        guard let k = loaded else { throw CryptoError("the key is not a PEM private key") }
        // Checked before the properties are set: once they are, a throw runs deinit, which
        // frees the key too (freed twice, libcrypto spun forever on its lock: a P-384 key).
        let kind: Kind
        switch EVP_PKEY_get_base_id(k) {
        case EVP_PKEY_EC:
            // The curve by name: secp256k1 has 256 bits too, and APNs signs with P-256 (ES256).
            var name = [CChar](repeating: 0, count: 64)
            var length = 0
            let curve = EVP_PKEY_get_group_name(k, &name, name.count, &length) == 1
                ? String(decoding: name.prefix(min(length, name.count)).map { UInt8(bitPattern: $0) }, as: UTF8.self) : "unknown"
            guard curve == "prime256v1" || curve == "P-256" else {
                EVP_PKEY_free(k)
                throw CryptoError("the EC key is on curve \(curve), not P-256")
            }
            kind = .ec
        case EVP_PKEY_RSA: kind = .rsa
        default:
            EVP_PKEY_free(k)
            throw CryptoError("the key is neither EC (P-256) nor RSA")
        }
        self.key = k
        self.kind = kind
    }

    deinit { EVP_PKEY_free(key) }

    /// SHA-256 signature: ES256 (raw r‖s, 64 bytes, as JWS wants) or RS256 (PKCS#1 v1.5).
    public func sign(_ message: [UInt8]) throws -> [UInt8] {
        guard let ctx = EVP_MD_CTX_new() else { throw CryptoError("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit(ctx, nil, EVP_sha256(), nil, key) == 1 else { throw CryptoError("EVP_DigestSignInit") }
        var length = 0
        guard message.withUnsafeBytes({ EVP_DigestSign(ctx, nil, &length, $0.baseAddress?.assumingMemoryBound(to: UInt8.self), $0.count) }) == 1 else {
            throw CryptoError("EVP_DigestSign (size)")
        }
        var signature = [UInt8](repeating: 0, count: length)
        guard message.withUnsafeBytes({ m in
            signature.withUnsafeMutableBufferPointer { EVP_DigestSign(ctx, $0.baseAddress, &length, m.baseAddress?.assumingMemoryBound(to: UInt8.self), m.count) }
        }) == 1 else { throw CryptoError("EVP_DigestSign") }
        signature.removeSubrange(length...)
        guard kind == .ec else { return signature }
        // DER ECDSA-Sig-Value → r‖s, each left-padded to 32 bytes.
        var p: UnsafePointer<UInt8>? = signature.withUnsafeBufferPointer { $0.baseAddress }
        return try signature.withUnsafeBufferPointer { buffer -> [UInt8] in
            p = buffer.baseAddress
            guard let sig = d2i_ECDSA_SIG(nil, &p, buffer.count) else { throw CryptoError("d2i_ECDSA_SIG") }
            defer { ECDSA_SIG_free(sig) }
            var r: OpaquePointer?, s: OpaquePointer?
            ECDSA_SIG_get0(sig, &r, &s)
            var out = [UInt8](repeating: 0, count: 64)
            guard out.withUnsafeMutableBufferPointer({ BN_bn2binpad(r, $0.baseAddress, 32) == 32 && BN_bn2binpad(s, $0.baseAddress! + 32, 32) == 32 }) else {
                throw CryptoError("BN_bn2binpad")
            }
            return out
        }
    }
}

/// Compact JWS: base64url(header).base64url(claims).base64url(signature).
public enum JWT {
    public static func base64URL(_ bytes: [UInt8]) -> String {
        var s = Data(bytes).base64EncodedString()
        s = s.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        while s.hasSuffix("=") { s.removeLast() }
        return s
    }

    public static func sign(header: String, claims: String, key: SigningKey) throws -> String {
        let input = base64URL(Array(header.utf8)) + "." + base64URL(Array(claims.utf8))
        return input + "." + base64URL(try key.sign(Array(input.utf8)))
    }

    static func quoted(_ s: String) -> String {
        var out: [UInt8] = []
        JSONWriter.appendString(s, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// APNs provider token: ES256, `kid` = key id, `iss` = team id, `iat` = now (seconds).
    public static func apns(key: SigningKey, keyID: String, teamID: String, issuedAt: Int64) throws -> String {
        try sign(header: "{\"alg\":\"ES256\",\"kid\":\(quoted(keyID))}", claims: "{\"iss\":\(quoted(teamID)),\"iat\":\(issuedAt)}", key: key)
    }

    /// Google service-account assertion: RS256, exchanged at `tokenURI` for an OAuth2 access token.
    public static func serviceAccount(key: SigningKey, keyID: String?, clientEmail: String, tokenURI: String, scope: String, issuedAt: Int64) throws -> String {
        let kid = keyID.map { ",\"kid\":\(quoted($0))" } ?? ""
        return try sign(header: "{\"alg\":\"RS256\",\"typ\":\"JWT\"\(kid)}",
                        claims: "{\"iss\":\(quoted(clientEmail)),\"scope\":\(quoted(scope)),\"aud\":\(quoted(tokenURI)),\"iat\":\(issuedAt),\"exp\":\(issuedAt + 3600)}",
                        key: key)
    }
}
