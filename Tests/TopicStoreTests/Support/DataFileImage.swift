import Foundation
import Testing

/// A closed store's data.mdb read into memory, with LMDB's format (mdb.c) decoded
/// as far as damage tests need: the meta pages, the table of tables and each
/// table's entries in key order, each located by its offset in the file. A test
/// damages a copy by writing bytes at those offsets (`DataFileImage.write`).
struct DataFileImage {
    static let pageSize = 4096
    let bytes: [UInt8]

    init(_ store: String) throws {
        bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: store + "/data.mdb")))
    }

    func word<T: FixedWidthInteger>(_ at: Int, _: T.Type) -> Int {
        Int(truncatingIfNeeded: T(littleEndian: bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: T.self) }))
    }

    /// The meta page (0 or 1) with the newer transaction id: the one LMDB opens.
    var newestMeta: Int { word(16 + 128, UInt64.self) >= word(Self.pageSize + 16 + 128, UInt64.self) ? 0 : 1 }
    /// File offset of the newest meta page's last page number (`mm_last_pg`).
    var lastPageOffset: Int { newestMeta * Self.pageSize + 16 + 120 }

    /// One leaf entry: its key, and where its value lies in the file.
    struct Entry {
        var key: [UInt8]
        var page: Int
        /// File offset of the node (its header: value size, flags, key size).
        var node: Int
        /// File offset of the key.
        var keyOffset: Int { node + 8 }
        var valueOffset: Int
        var valueSize: Int
    }

    /// The leaf entries of the tree whose root is `root`, in key order.
    func entries(root: Int) -> [Entry] {
        guard root >= 0, root * Self.pageSize < bytes.count else { return [] }
        let base = root * Self.pageSize
        let flags = word(base + 10, UInt16.self), lower = word(base + 12, UInt16.self)
        var result: [Entry] = []
        for i in 0..<(lower - 16) / 2 {
            let node = base + word(base + 16 + 2 * i, UInt16.self)
            let low = word(node, UInt16.self), high = word(node + 2, UInt16.self), nodeFlags = word(node + 4, UInt16.self)
            let keySize = word(node + 6, UInt16.self)
            if flags & 0x01 != 0 {  // a branch: the child's page number in the size words and flags
                result += entries(root: low | high << 16 | nodeFlags << 32)
            } else {
                let key = Array(bytes[node + 8..<node + 8 + keySize])
                var value = node + 8 + keySize, size = low | high << 16
                if nodeFlags & 0x01 != 0 { value = word(value, UInt64.self) * Self.pageSize + 16 }  // on overflow pages
                result.append(Entry(key: key, page: root, node: node, valueOffset: value, valueSize: size))
            }
        }
        return result
    }

    /// The main tree's entries: one per named table, its value the table's record (MDB_db).
    var tableRecords: [Entry] { entries(root: word(newestMeta * Self.pageSize + 16 + 72 + 40, UInt64.self)) }

    /// The record of `table` in the table of tables.
    func tableRecord(_ table: String) throws -> Entry {
        try #require(tableRecords.first { $0.key == Array(table.utf8) }, "no table \(table)")
    }

    /// The entries of `table`, in key order.
    func entries(_ table: String) throws -> [Entry] {
        let record = try tableRecord(table)
        return entries(root: word(record.valueOffset + 40, UInt64.self))
    }

    func value(_ e: Entry) -> [UInt8] { Array(bytes[e.valueOffset..<e.valueOffset + e.valueSize]) }

    /// Writes `bytes` at `offset` of `store`'s data.mdb.
    static func write(_ store: String, at offset: Int, _ bytes: [UInt8]) throws {
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: store + "/data.mdb"))
        try handle.seek(toOffset: UInt64(offset))
        try handle.write(contentsOf: bytes)
        try handle.close()
    }

    /// A copy of `store`'s data.mdb in `dir/name` (no lock file), to damage.
    static func copy(_ store: String, _ dir: TemporaryDirectory, _ name: String) throws -> String {
        let to = dir.sub(name)
        try FileManager.default.createDirectory(atPath: to, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: store + "/data.mdb", toPath: to + "/data.mdb")
        return to
    }
}
