import LMDB
import Roaring

/// One stored roaring container: the devices of one topic whose ordinals share
/// the same high 16 bits. Keeping a container per key means a subscription
/// rewrites at most 8 KiB, never a whole topic.
enum PostingChunk {
    static func high(_ ordinal: UInt32) -> UInt16 { UInt16(ordinal >> 16) }

    /// Decodes a stored chunk and checks that every ordinal belongs under its key.
    static func decode(_ bytes: UnsafeRawBufferPointer, pid: UInt32, topic: UInt32, high: UInt16) throws -> Bitmap {
        let place = "postings/\(pid)/\(topic)/\(high)"
        let bitmap: Bitmap
        do { bitmap = try Bitmap(deserializing: bytes) } catch {
            throw ProjectionCorruption(place: place, reason: "\(error)")
        }
        guard let lo = bitmap.min, let hi = bitmap.max, lo >> 16 == UInt32(high), hi >> 16 == UInt32(high) else {
            throw ProjectionCorruption(place: place, reason: "container is empty or holds ordinals of another chunk")
        }
        return bitmap
    }

    /// The whole bitmap of `topic`: the union of its chunks, in one cursor walk.
    static func read(pid: UInt32, topic: UInt32, tables: ProjectionTables, _ txn: borrowing Transaction) throws -> Bitmap {
        let prefix = Keys.pair(pid, topic)
        var result = Bitmap()
        try txn.withCursor(tables.postings) { cursor in
            var entry = try cursor.seek(atLeast: prefix)
            while let (key, value) = entry, Keys.hasPrefix(key, prefix) {
                guard key.count == 10 else {
                    throw ProjectionCorruption(place: "postings/\(pid)/\(topic)", reason: "key of \(key.count) bytes")
                }
                let high = key.loadBigEndian(at: 8, as: UInt16.self)
                // Chunks are disjoint and ascending: the union only appends containers.
                result.formUnion(try decode(value, pid: pid, topic: topic, high: high))
                entry = try cursor.next()
            }
        }
        return result
    }
}
