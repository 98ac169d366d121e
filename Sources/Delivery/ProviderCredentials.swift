import Foundation
import LMDB
import TopicStore

/// APNs token-based authentication: a .p8 key and the ids Apple gave with it.
public struct APNsCredentials: Codable, Sendable, Equatable {
    public var keyPEM: String
    public var keyID: String
    public var teamID: String
    public var bundleID: String
    /// The development gateway instead of production.
    public var sandbox: Bool
    public init(keyPEM: String, keyID: String, teamID: String, bundleID: String, sandbox: Bool) {
        self.keyPEM = keyPEM
        self.keyID = keyID
        self.teamID = teamID
        self.bundleID = bundleID
        self.sandbox = sandbox
    }
}

/// FCM HTTP v1: the service account JSON's fields that matter.
public struct FCMCredentials: Codable, Sendable, Equatable {
    public var projectID: String
    public var clientEmail: String
    public var privateKeyPEM: String
    public var privateKeyID: String?
    public var tokenURI: String
    public init(projectID: String, clientEmail: String, privateKeyPEM: String, privateKeyID: String?, tokenURI: String) {
        self.projectID = projectID
        self.clientEmail = clientEmail
        self.privateKeyPEM = privateKeyPEM
        self.privateKeyID = privateKeyID
        self.tokenURI = tokenURI
    }

    /// Reads a Google service-account JSON file.
    public init(serviceAccountJSON data: Data) throws {
        guard let o = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw CredentialError("the service account file is not a JSON object")
        }
        func field(_ k: String) throws -> String {
            guard let s = o[k] as? String, !s.isEmpty else { throw CredentialError("the service account file has no \(k)") }
            return s
        }
        if let t = o["type"] as? String, t != "service_account" { throw CredentialError("the file's type is \(t), not service_account") }
        self.init(projectID: try field("project_id"), clientEmail: try field("client_email"), privateKeyPEM: try field("private_key"),
                  privateKeyID: o["private_key_id"] as? String, tokenURI: (o["token_uri"] as? String) ?? "https://oauth2.googleapis.com/token")
    }
}

public struct CredentialError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ d: String) { description = d }
}

/// Provider credentials per project, kept like keys in the store's environment
/// (auxiliary table `provider_credentials`, key `project ‖ 0 ‖ apns|fcm`, JSON).
/// The private keys are stored as given: protect the data directory as you would the .p8 file.
public final class CredentialStore: Sendable {
    public static let table = "provider_credentials"
    private let store: TopicStore

    public init(store: TopicStore) throws {
        self.store = store
        try store.openAuxiliary([Self.table])
    }

    static func key(_ project: String, _ provider: String) -> [UInt8] { Array(project.utf8) + [0] + Array(provider.utf8) }

    private func put(_ project: String, _ provider: String, _ value: Data) throws {
        try store.writeAuxiliary { txn, tables in
            guard let db = tables[Self.table] else { throw StoreError.readOnly }
            try txn.put(db, Self.key(project, provider), Array(value))
        }
    }

    private func get(_ project: String, _ provider: String) throws -> Data? {
        try store.readAuxiliary { txn, tables in
            guard let db = tables[Self.table], let v = try txn.get(db, Self.key(project, provider)) else { return nil }
            return Data(v)
        }
    }

    /// Stores APNs credentials after checking that the key is a P-256 key that signs.
    public func setAPNs(_ c: APNsCredentials, project: String) throws {
        let key = try SigningKey(pem: c.keyPEM)
        guard key.kind == .ec else { throw CredentialError("an APNs .p8 key is an EC P-256 key; this one is RSA") }
        _ = try JWT.apns(key: key, keyID: c.keyID, teamID: c.teamID, issuedAt: 0)
        for (name, v) in [("key id", c.keyID), ("team id", c.teamID), ("bundle id", c.bundleID)] where v.isEmpty {
            throw CredentialError("the APNs \(name) is empty")
        }
        try put(project, "apns", try JSONEncoder().encode(c))
    }

    /// Stores FCM credentials after checking that the key is an RSA key that signs.
    public func setFCM(_ c: FCMCredentials, project: String) throws {
        let key = try SigningKey(pem: c.privateKeyPEM)
        guard key.kind == .rsa else { throw CredentialError("a service account key is RSA; this one is EC") }
        try put(project, "fcm", try JSONEncoder().encode(c))
    }

    public func apns(project: String) throws -> APNsCredentials? {
        try get(project, "apns").map { try JSONDecoder().decode(APNsCredentials.self, from: $0) }
    }

    public func fcm(project: String) throws -> FCMCredentials? {
        try get(project, "fcm").map { try JSONDecoder().decode(FCMCredentials.self, from: $0) }
    }

    /// Removes one provider's credentials; false when there were none.
    @discardableResult
    public func remove(project: String, provider: String) throws -> Bool {
        try store.writeAuxiliary { txn, tables in
            guard let db = tables[Self.table] else { throw StoreError.readOnly }
            return try txn.delete(db, Self.key(project, provider))
        }
    }

    /// (project, provider) pairs that have credentials.
    public func list() throws -> [(project: String, provider: String)] {
        try store.readAuxiliary { txn, tables in
            guard let db = tables[Self.table] else { return [] }
            return try txn.withCursor(db) { cursor in
                var out: [(String, String)] = []
                var entry = try cursor.first()
                while let (key, _) = entry {
                    let parts = Array(key).split(separator: 0, maxSplits: 1, omittingEmptySubsequences: false)
                    if parts.count == 2 { out.append((String(decoding: parts[0], as: UTF8.self), String(decoding: parts[1], as: UTF8.self))) }
                    entry = try cursor.next()
                }
                return out
            }
        }
    }
}
