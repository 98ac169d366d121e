import LMDB
import Roaring

/// One stored roaring container: the devices of one topic whose ordinals share
/// the same high 16 bits. Keeping a container per key means a subscription
/// rewrites at most 8 KiB, never a whole topic.
///
/// Keys are `pid ‖ high16 ‖ topic`: the containers of one 65,536-device slice
/// sit together, so a batch of new devices (which all land in the newest slice)
/// dirties a few contiguous pages instead of one page per topic; a topic's
/// bitmap is one point read per slice.
enum PostingChunk {
    static func high(_ ordinal: UInt32) -> UInt16 { UInt16(ordinal >> 16) }

    /// Decodes a stored chunk and checks that every ordinal belongs under its key.
    static func decode(_ bytes: UnsafeRawBufferPointer, pid: UInt32, topic: UInt32, high: UInt16) throws -> Bitmap {
        // The place is named only when there is something to report: a count reads dozens of chunks.
        func place() -> String { "postings/\(pid)/\(high)/\(topic)" }
        let bitmap: Bitmap
        do { bitmap = try Bitmap(deserializing: bytes) } catch {
            throw ProjectionCorruption(place: place(), reason: "\(error)")
        }
        guard let lo = bitmap.min, let hi = bitmap.max, lo >> 16 == UInt32(high), hi >> 16 == UInt32(high) else {
            throw ProjectionCorruption(place: place(), reason: "container is empty or holds ordinals of another chunk")
        }
        return bitmap
    }

    /// Adds a stored chunk to `result`, which holds only lower slices: its
    /// container is copied straight in, or, when the bytes are not one
    /// well-formed container of that slice, decoded (which reports what is wrong).
    static func append(_ bytes: UnsafeRawBufferPointer, to result: inout Bitmap, pid: UInt32, topic: UInt32, high: UInt16) throws {
        if result.appendSlice(high, stored: bytes) { return }
        result.formUnion(try decode(bytes, pid: pid, topic: topic, high: high))
    }

    /// The highest slice any topic of the project uses (nil when it has no postings).
    static func maxHigh(pid: UInt32, tables: ProjectionTables, _ txn: borrowing Transaction) throws -> UInt16? {
        try txn.withCursor(tables.postings) { cursor in
            let entry: Cursor.Entry?
            if pid == .max {
                entry = try cursor.last()
            } else if try cursor.seek(atLeast: Keys.project(pid + 1)) != nil {
                entry = try cursor.previous()
            } else {
                entry = try cursor.last()
            }
            guard let (key, _) = entry, key.count == 10, key.loadBigEndian(at: 0, as: UInt32.self) == pid else { return nil }
            return key.loadBigEndian(at: 4, as: UInt16.self)
        }
    }

    /// The whole bitmap of `topic`: the union of its slices, ascending.
    static func read(pid: UInt32, topic: UInt32, tables: ProjectionTables, _ txn: borrowing Transaction) throws -> Bitmap {
        var result = Bitmap()
        guard let top = try maxHigh(pid: pid, tables: tables, txn) else { return result }
        for high in 0...top {
            // Slices are disjoint and ascending: each one appends a container.
            if let v = try txn.get(tables.postings, Keys.chunk(pid, topic, high)) {
                try append(v, to: &result, pid: pid, topic: topic, high: high)
            }
        }
        return result
    }
}
