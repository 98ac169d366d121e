import Foundation
import LMDB
import SubscriptionLog
import TopicStore

/// Projects and their API keys, kept in the store's own LMDB environment
/// (tables `access_projects` and `access_keys`) so that the command line and a
/// running server share them. Only the SHA-256 of a key is stored.
///
/// Every lookup reads a fresh snapshot (or a cached answer at most
/// `cacheLifetime` old), so a key added or revoked by another process is
/// honoured by a running server within that time, without a restart.
public final class AccessControl: Sendable {
    public static let projectsTable = "access_projects"
    public static let keysTable = "access_keys"
    /// Keys given with `--value` must be this long (bytes of printable ASCII).
    public static let keyLength = 16...256

    private let store: TopicStore
    private let cache: KeyCache
    /// How long an answer to `authenticate` may be reused.
    public let cacheLifetime: Double

    /// Opens the access tables, creating them unless the store is read-only
    /// (a read-only store that has none sees no projects and no keys).
    public init(store: TopicStore, cacheLifetime: Double = 0.5) throws {
        self.store = store
        self.cacheLifetime = cacheLifetime
        self.cache = KeyCache(lifetime: cacheLifetime)
        try store.openAuxiliary([Self.projectsTable, Self.keysTable])
    }

    // MARK: Projects

    @discardableResult
    public func addProject(_ name: String) throws -> ProjectInfo {
        var problems: [ValidationError] = []
        Validation.check(projectName: name, into: &problems)
        if let p = problems.first { throw AccessError.invalidProjectName(name, reason: p.message) }
        let now = Self.now()
        return try store.writeAuxiliary { txn, tables in
            let db = try Self.table(Self.projectsTable, tables)
            if try txn.get(db, Array(name.utf8)) != nil { throw AccessError.projectExists(name) }
            try txn.put(db, Array(name.utf8), AccessCodec.project(createdAt: now))
            return ProjectInfo(name: name, createdAt: now)
        }
    }

    public func projects() throws -> [ProjectInfo] {
        return try store.readAuxiliary { txn, tables in
            guard let db = tables[Self.projectsTable] else { return [] }
            return try txn.withCursor(db) { cursor in
                var result: [ProjectInfo] = []
                var entry = try cursor.first()
                while let (key, value) = entry {
                    result.append(try AccessCodec.decodeProject(name: String(decoding: key, as: UTF8.self), value))
                    entry = try cursor.next()
                }
                return result
            }
        }
    }

    public func project(named name: String) throws -> ProjectInfo? {
        return try store.readAuxiliary { txn, tables in
            guard let db = tables[Self.projectsTable] else { return nil }
            guard let v = try txn.get(db, Array(name.utf8)) else { return nil }
            return try AccessCodec.decodeProject(name: name, v)
        }
    }

    // MARK: Keys

    /// A fresh random key: a kind prefix and 32 base-62 characters (190 bits)
    /// from the system's cryptographic generator.
    /// What generated keys of `kind` start with.
    public static func prefix(_ kind: KeyKind) -> String { kind == .client ? "tsc_" : "tss_" }

    public static func generateKey(kind: KeyKind) -> String {
        let alphabet = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".utf8)
        var rng = SystemRandomNumberGenerator()
        var out = Array(prefix(kind).utf8)
        for _ in 0..<32 { out.append(alphabet[Int(rng.next(upperBound: UInt64(alphabet.count)))]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// Registers a key for `project` (a random one when `value` is nil) and
    /// returns it: the only time the key itself is seen.
    public func addKey(project: String, kind: KeyKind, value: String? = nil) throws -> (key: String, info: KeyInfo) {
        let key = value ?? Self.generateKey(kind: kind)
        if let value {
            guard Self.keyLength.contains(value.utf8.count) else {
                throw AccessError.invalidKey(reason: "a key must be \(Self.keyLength.lowerBound) to \(Self.keyLength.upperBound) characters")
            }
            guard value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw AccessError.invalidKey(reason: "a key may contain only printable ASCII characters without spaces")
            }
            // The prefixes say what a key may do: a server key that reads tsc_ could be shipped in an app.
            let other: KeyKind = kind == .client ? .server : .client
            guard !value.hasPrefix(Self.prefix(other)) else {
                throw AccessError.invalidKey(reason: "a \(kind) key may not start with \(Self.prefix(other)), the prefix of \(other) keys")
            }
        }
        let hash = KeyHash(key: key)
        let now = Self.now()
        let info = try store.writeAuxiliary { txn, tables -> KeyInfo in
            let projects = try Self.table(Self.projectsTable, tables), keys = try Self.table(Self.keysTable, tables)
            guard try txn.get(projects, Array(project.utf8)) != nil else { throw AccessError.noSuchProject(project) }
            if try txn.get(keys, hash.bytes) != nil { throw AccessError.keyExists }
            try txn.put(keys, hash.bytes, AccessCodec.key(project: project, kind: kind, createdAt: now, revokedAt: nil))
            return KeyInfo(id: hash.id, project: project, kind: kind, createdAt: now, revokedAt: nil)
        }
        cache.removeAll()
        return (key, info)
    }

    /// Revokes a key given as the key itself or as its id (from `keys()`).
    /// Revoking a revoked key changes nothing and returns it.
    @discardableResult
    public func revoke(_ keyOrID: String) throws -> KeyInfo {
        try revokeReporting(keyOrID).key
    }

    /// Revokes a key (given as the key or its id) and tells whether it was
    /// active until now: revoking a revoked key changes nothing and keeps its
    /// first revocation time, and a caller can say so.
    public func revokeReporting(_ keyOrID: String) throws -> (key: KeyInfo, wasActive: Bool) {
        let now = Self.now()
        let (info, wasActive) = try store.writeAuxiliary { txn, tables -> (KeyInfo, Bool) in
            let keys = try Self.table(Self.keysTable, tables)
            var hash = KeyHash(key: keyOrID)
            if try txn.get(keys, hash.bytes) == nil {
                guard let found = try Self.findByID(keyOrID.lowercased(), keys, txn) else { throw AccessError.noSuchKey(keyOrID) }
                hash = found
            }
            guard let stored = try txn.get(keys, hash.bytes) else { throw AccessError.noSuchKey(keyOrID) }
            var info = try AccessCodec.decodeKey(id: hash.id, stored)
            guard info.revokedAt == nil else { return (info, false) }
            info.revokedAt = now
            try txn.put(keys, hash.bytes, AccessCodec.key(project: info.project, kind: info.kind,
                                                           createdAt: info.createdAt, revokedAt: now))
            return (info, true)
        }
        cache.removeAll()
        return (info, wasActive)
    }

    private static func findByID(_ id: String, _ db: Database, _ txn: borrowing Transaction) throws -> KeyHash? {
        guard id.utf8.count == 16, id.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }) else { return nil }
        return try txn.withCursor(db) { cursor in
            var entry = try cursor.first()
            while let (key, _) = entry {
                if let h = KeyHash(stored: key), h.id == id { return h }
                entry = try cursor.next()
            }
            return nil
        }
    }

    /// Every key (active and revoked), optionally of one project, oldest first.
    public func keys(project: String? = nil) throws -> [KeyInfo] {
        let all = try store.readAuxiliary { txn, tables -> [KeyInfo] in
            guard let db = tables[Self.keysTable] else { return [] }
            return try txn.withCursor(db) { cursor in
                var result: [KeyInfo] = []
                var entry = try cursor.first()
                while let (key, value) = entry {
                    guard let hash = KeyHash(stored: key) else { throw AccessError.corrupted(place: "access_keys (a key of \(key.count) bytes)") }
                    result.append(try AccessCodec.decodeKey(id: hash.id, value))
                    entry = try cursor.next()
                }
                return result
            }
        }
        return all.filter { project == nil || $0.project == project }
            .sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
    }

    /// The credential of an active key, or nil for an unknown or revoked one.
    public func authenticate(_ key: String) throws -> Credential? {
        guard !key.isEmpty, key.utf8.count <= Self.keyLength.upperBound else { return nil }
        let hash = KeyHash(key: key)
        let now = DispatchTime.now().uptimeNanoseconds
        if let cached = cache.lookup(hash, now: now) { return cached }
        let directory = store.directory
        let credential = try store.readAuxiliary { txn, tables -> Credential? in
            guard let db = tables[Self.keysTable], let v = try txn.get(db, hash.bytes) else { return nil }
            // A stored key that does not decode, or that names a project the projects table
            // lacks (projects are never removed), is damage: the server says so (503) rather
            // than trust it or answer 500.
            let info: KeyInfo
            do { info = try AccessCodec.decodeKey(id: hash.id, v) } catch {
                throw StoreError.damaged(path: directory, what: "\(Self.keysTable)/\(hash.id)",
                                         reason: "the key's record does not decode (\(v.count) bytes)")
            }
            guard info.isActive else { return nil }
            let name = Array(info.project.utf8)
            guard let projects = tables[Self.projectsTable], let p = try txn.get(projects, name) else {
                throw StoreError.damaged(path: directory, what: "\(Self.keysTable)/\(hash.id)",
                                         reason: "its project '\(AccessCodec.printable(name))' does not exist in \(Self.projectsTable)")
            }
            if (try? AccessCodec.decodeProject(name: info.project, p)) == nil {
                throw StoreError.damaged(path: directory, what: "\(Self.projectsTable)/\(AccessCodec.printable(name))",
                                         reason: "the project's record does not decode (\(p.count) bytes)")
            }
            return Credential(project: info.project, kind: info.kind, keyID: info.id)
        }
        cache.store(hash, credential, now: now)
        return credential
    }

    // MARK: First run

    /// When no project exists yet, creates project `name` with one fresh client
    /// key and one fresh server key, in one transaction, and returns the keys.
    /// Returns nil when any project already exists.
    public func bootstrap(project name: String = "demo") throws -> (project: String, client: String, server: String)? {
        let client = Self.generateKey(kind: .client), server = Self.generateKey(kind: .server)
        let now = Self.now()
        let created = try store.writeAuxiliary { txn, tables -> Bool in
            let projects = try Self.table(Self.projectsTable, tables), keys = try Self.table(Self.keysTable, tables)
            let empty = try txn.withCursor(projects) { try $0.first() == nil }
            guard empty else { return false }
            try txn.put(projects, Array(name.utf8), AccessCodec.project(createdAt: now))
            try txn.put(keys, KeyHash(key: client).bytes, AccessCodec.key(project: name, kind: .client, createdAt: now, revokedAt: nil))
            try txn.put(keys, KeyHash(key: server).bytes, AccessCodec.key(project: name, kind: .server, createdAt: now, revokedAt: nil))
            return true
        }
        cache.removeAll()
        return created ? (name, client, server) : nil
    }

    // MARK: Helpers

    private static func table(_ name: String, _ tables: [String: Database]) throws -> Database {
        guard let db = tables[name] else { throw StoreError.readOnly }
        return db
    }

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}

/// Recent answers of `authenticate`, each reused for at most `lifetime` seconds.
final class KeyCache: @unchecked Sendable {
    private struct Entry { var credential: Credential?; var loadedAt: UInt64 }
    private let lock = NSLock()
    private var entries: [KeyHash: Entry] = [:]
    private let lifetimeNanos: UInt64
    private let capacity = 10_000

    init(lifetime: Double) { lifetimeNanos = UInt64(max(0, lifetime) * 1e9) }

    func lookup(_ hash: KeyHash, now: UInt64) -> Credential?? {
        lock.lock(); defer { lock.unlock() }
        guard let e = entries[hash], now &- e.loadedAt < lifetimeNanos else { return nil }
        return .some(e.credential)
    }

    func store(_ hash: KeyHash, _ credential: Credential?, now: UInt64) {
        guard lifetimeNanos > 0 else { return }
        lock.lock(); defer { lock.unlock() }
        if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
        entries[hash] = Entry(credential: credential, loadedAt: now)
    }

    func removeAll() {
        lock.lock(); defer { lock.unlock() }
        entries.removeAll()
    }
}

/// An access record that cannot be right, named by its table and key: a project
/// by its name, an API key by its id (the first 8 bytes of its hash, as `key list`
/// shows it).
public struct AccessIssue: Sendable, CustomStringConvertible {
    public var table: String
    public var key: String
    public var message: String
    public var description: String { "\(table)/\(key): \(message)" }
}

extension AccessControl {
    /// What `audit` found in the access tables.
    public struct Check: Sendable {
        public var projects = 0
        public var keys = 0
        public var issues: [AccessIssue] = []
    }

    /// Decodes every record of the access tables, as `serve` would when a request
    /// names it, and reports each one that does not decode (a bad format version or
    /// kind, a key that is not a hash, a name that cannot be a project) and each key
    /// whose project does not exist: `serve` would answer that key for a project
    /// no one made. Read-only; tables a store does not have are empty.
    public func check() throws -> Check {
        try store.readAuxiliary { txn, tables in
            var check = Check()
            var projects = Set<String>()
            if let db = tables[Self.projectsTable] {
                try txn.withCursor(db) { cursor in
                    var entry = try cursor.first()
                    while let (key, value) = entry {
                        check.projects += 1
                        let name = String(decoding: key, as: UTF8.self)
                        var problems: [ValidationError] = []
                        Validation.check(projectName: name, into: &problems)
                        if !key.elementsEqual(name.utf8) || !problems.isEmpty {
                            check.issues.append(AccessIssue(table: Self.projectsTable, key: AccessCodec.printable(key),
                                                            message: "its name cannot be a project's (\(problems.first?.message ?? "it is not UTF-8"))"))
                        } else if (try? AccessCodec.decodeProject(name: name, value)) == nil {
                            check.issues.append(AccessIssue(table: Self.projectsTable, key: name,
                                                            message: "does not decode (\(value.count) bytes, format version \(value.first.map { "\($0)" } ?? "none"))"))
                        } else {
                            projects.insert(name)
                        }
                        entry = try cursor.next()
                    }
                }
            }
            if let db = tables[Self.keysTable] {
                try txn.withCursor(db) { cursor in
                    var entry = try cursor.first()
                    while let (key, value) = entry {
                        check.keys += 1
                        guard let hash = KeyHash(stored: key) else {
                            check.issues.append(AccessIssue(table: Self.keysTable, key: KeyHash.hex(key.prefix(8)),
                                                            message: "its key is \(key.count) bytes, not a 32-byte hash"))
                            entry = try cursor.next()
                            continue
                        }
                        if let info = try? AccessCodec.decodeKey(id: hash.id, value) {
                            let known = projects.contains(info.project)
                            if !known {
                                check.issues.append(AccessIssue(table: Self.keysTable, key: hash.id,
                                    message: "its project '\(AccessCodec.printable(Array(info.project.utf8)))' does not exist in \(Self.projectsTable) "
                                        + "(a \(info.kind) key, \(info.isActive ? "active" : "revoked"))"))
                            }
                        } else {
                            check.issues.append(AccessIssue(table: Self.keysTable, key: hash.id,
                                                            message: "does not decode (\(value.count) bytes, format version \(value.first.map { "\($0)" } ?? "none"))"))
                        }
                        entry = try cursor.next()
                    }
                }
            }
            return check
        }
    }
}
