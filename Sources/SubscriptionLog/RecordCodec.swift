/// The binary form of a log record, version 1:
///
/// ```
/// u8  version (1)        u8  type
/// u64 sequence           i64 timestamp (ms since 1970)
/// str project            ...type-specific fields...
/// u32 CRC-32C of every byte before it
/// ```
/// Integers are big-endian; `str` is a u16 length and UTF-8 bytes.
/// The version byte leaves room for a hash-chained format without rewriting history.
public enum RecordCodec {
    public static let currentVersion: UInt8 = 1

    enum TypeCode: UInt8 {
        case token = 1, register = 2, unregister = 3, unregisterAll = 4, tokenRejected = 5
    }

    public static func encode(_ record: LogRecord) -> [UInt8] {
        var w = ByteWriter(capacity: 96)
        w.u8(currentVersion)
        let event = record.event
        switch event.body {
        case .token: w.u8(TypeCode.token.rawValue)
        case .register: w.u8(TypeCode.register.rawValue)
        case .unregister: w.u8(TypeCode.unregister.rawValue)
        case .unregisterAll: w.u8(TypeCode.unregisterAll.rawValue)
        case .tokenRejected: w.u8(TypeCode.tokenRejected.rawValue)
        }
        w.u64(record.sequence)
        w.i64(record.timestamp)
        w.string(event.project)
        switch event.body {
        case .token(let deviceID, let token, let platform):
            w.string(deviceID)
            w.string(token)
            w.u8(platform.rawValue)
        case .register(let deviceID, let topics):
            w.string(deviceID)
            w.u16(UInt16(topics.count))
            for topic in topics {
                var flags: UInt8 = 0
                if topic.title != nil { flags |= 1 }
                if let single = topic.single { flags |= 2; if single { flags |= 4 } }
                w.string(topic.code)
                w.u8(flags)
                if let title = topic.title { w.string(title) }
            }
        case .unregister(let deviceID, let codes):
            w.string(deviceID)
            w.u16(UInt16(codes.count))
            for code in codes { w.string(code) }
        case .unregisterAll(let deviceID):
            w.string(deviceID)
        case .tokenRejected(let token, let at, let reason):
            w.string(token)
            w.i64(at)
            w.string(reason)
        }
        let crc = w.bytes.withUnsafeBytes { CRC32C.checksum($0) }
        w.u32(crc)
        return w.bytes
    }

    /// Decodes a record stored under `key`; every failure names the sequence and offset.
    public static func decode(_ bytes: UnsafeRawBufferPointer, key: UInt64) throws -> LogRecord {
        guard bytes.count >= 1 + 1 + 8 + 8 + 2 + 4 else {
            throw RecordCorruption(sequence: key, offset: 0, reason: "record of \(bytes.count) bytes is too short")
        }
        let body = UnsafeRawBufferPointer(rebasing: bytes[0..<bytes.count - 4])
        let stored = bytes.loadBigEndian(at: bytes.count - 4, as: UInt32.self)
        let computed = CRC32C.checksum(body)
        guard stored == computed else {
            throw RecordCorruption(sequence: key, offset: bytes.count - 4,
                                   reason: "checksum mismatch (stored \(hex(stored)), computed \(hex(computed)))")
        }
        var r = ByteReader(body)
        do {
            let version = try r.u8()
            guard version == currentVersion else {
                throw RecordCorruption(sequence: key, offset: 0, reason: "unknown record version \(version)")
            }
            let typeOffset = r.offset
            guard let type = TypeCode(rawValue: try r.u8()) else {
                throw RecordCorruption(sequence: key, offset: typeOffset, reason: "unknown event type")
            }
            let sequence = try r.u64()
            guard sequence == key else {
                throw RecordCorruption(sequence: key, offset: 2, reason: "record says sequence \(sequence)")
            }
            let timestamp = try r.i64()
            let project = try r.string()
            let eventBody: EventBody
            switch type {
            case .token:
                let deviceID = try r.string()
                let token = try r.string()
                let platformOffset = r.offset
                guard let platform = Platform(rawValue: try r.u8()) else {
                    throw RecordCorruption(sequence: key, offset: platformOffset, reason: "unknown platform")
                }
                eventBody = .token(deviceID: deviceID, token: token, platform: platform)
            case .register:
                let deviceID = try r.string()
                let n = Int(try r.u16())
                var topics: [TopicSpec] = []
                topics.reserveCapacity(n)
                for _ in 0..<n {
                    let code = try r.string()
                    let flags = try r.u8()
                    let title = flags & 1 != 0 ? try r.string() : nil
                    let single: Bool? = flags & 2 != 0 ? (flags & 4 != 0) : nil
                    topics.append(TopicSpec(code: code, title: title, single: single))
                }
                eventBody = .register(deviceID: deviceID, topics: topics)
            case .unregister:
                let deviceID = try r.string()
                let n = Int(try r.u16())
                var codes: [String] = []
                codes.reserveCapacity(n)
                for _ in 0..<n { codes.append(try r.string()) }
                eventBody = .unregister(deviceID: deviceID, codes: codes)
            case .unregisterAll:
                eventBody = .unregisterAll(deviceID: try r.string())
            case .tokenRejected:
                let token = try r.string()
                let at = try r.i64()
                let reason = try r.string()
                eventBody = .tokenRejected(token: token, rejectedAt: at, reason: reason)
            }
            guard r.remaining == 0 else {
                throw RecordCorruption(sequence: key, offset: r.offset, reason: "\(r.remaining) unexpected trailing bytes")
            }
            return LogRecord(sequence: sequence, timestamp: timestamp, event: Event(project: project, body: eventBody))
        } catch let e as ByteReader.OutOfBounds {
            throw RecordCorruption(sequence: key, offset: e.offset, reason: "field of \(e.wanted) bytes runs past the end")
        } catch let e as RecordCorruption {
            throw e
        } catch {
            throw RecordCorruption(sequence: key, offset: r.offset, reason: "\(error)")
        }
    }

    /// Reads only the timestamp of an encoded record (for time searches), after the same checks as `decode`.
    public static func timestamp(of bytes: UnsafeRawBufferPointer, key: UInt64) throws -> Int64 {
        guard bytes.count >= 18 else {
            throw RecordCorruption(sequence: key, offset: 0, reason: "record of \(bytes.count) bytes is too short")
        }
        return Int64(bitPattern: bytes.loadBigEndian(at: 10, as: UInt64.self))
    }

    private static func hex(_ v: UInt32) -> String {
        let s = String(v, radix: 16)
        return "0x" + String(repeating: "0", count: 8 - s.count) + s
    }
}

/// A log record that cannot be trusted, located by its sequence and byte offset.
public struct RecordCorruption: Error, Sendable, CustomStringConvertible {
    public let sequence: UInt64
    public let offset: Int
    public let reason: String
    public var description: String { "corrupt log record at sequence \(sequence), byte \(offset): \(reason)" }
}
