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
        let place = "postings/\(pid)/\(high)/\(topic)"
        let bitmap: Bitmap
        do { bitmap = try Bitmap(deserializing: bytes) } catch {
            throw ProjectionCorruption(place: place, reason: "\(error)")
        }
        guard let lo = bitmap.min, let hi = bitmap.max, lo >> 16 == UInt32(high), hi >> 16 == UInt32(high) else {
            throw ProjectionCorruption(place: place, reason: "container is empty or holds ordinals of another chunk")
        }
        return bitmap
    }

    /// How many devices a stored chunk of slice `high` holds, read from the
    /// portable format's header (each container's key and cardinality are
    /// there) without decoding the containers; nil when the bytes are not a
    /// header it can read or name another slice (then decode, which reports it).
    static func cardinality(of bytes: UnsafeRawBufferPointer, high: UInt16) -> Int? {
        func u16(_ at: Int) -> Int { Int(bytes[at]) | Int(bytes[at + 1]) << 8 }
        func u32(_ at: Int) -> Int { u16(at) | u16(at + 2) << 16 }
        guard bytes.count >= 8 else { return nil }
        let cookie = u32(0)
        let containers: Int, descriptive: Int
        if cookie & 0xFFFF == 12347 {          // SERIAL_COOKIE: run containers possible, flags follow
            containers = (cookie >> 16) + 1
            descriptive = 4 + (containers + 7) / 8
        } else if cookie == 12346 {             // SERIAL_COOKIE_NO_RUNCONTAINER
            containers = u32(4)
            descriptive = 8
        } else {
            return nil
        }
        guard containers <= 65_536, bytes.count >= descriptive + 4 * containers else { return nil }
        var total = 0
        for i in 0..<containers {
            guard u16(descriptive + 4 * i) == Int(high) else { return nil }
            total += u16(descriptive + 4 * i + 2) + 1
        }
        return total
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

    /// One slice of `topic`, or nil when it has no device there.
    static func read(pid: UInt32, topic: UInt32, high: UInt16, tables: ProjectionTables, _ txn: borrowing Transaction) throws -> Bitmap? {
        guard let v = try txn.get(tables.postings, Keys.chunk(pid, topic, high)) else { return nil }
        return try decode(v, pid: pid, topic: topic, high: high)
    }

    /// How many devices slice `high` of `topic` holds, from the stored header
    /// (decoded only if the header cannot be read).
    static func count(pid: UInt32, topic: UInt32, high: UInt16, tables: ProjectionTables, _ txn: borrowing Transaction) throws -> Int {
        guard let v = try txn.get(tables.postings, Keys.chunk(pid, topic, high)) else { return 0 }
        if let n = cardinality(of: v, high: high) { return n }
        return try decode(v, pid: pid, topic: topic, high: high).count
    }

    /// The whole bitmap of `topic`: the union of its slices, ascending.
    static func read(pid: UInt32, topic: UInt32, tables: ProjectionTables, _ txn: borrowing Transaction) throws -> Bitmap {
        var result = Bitmap()
        guard let top = try maxHigh(pid: pid, tables: tables, txn) else { return result }
        for high in 0...top {
            // Slices are disjoint and ascending: the union only appends containers.
            if let slice = try read(pid: pid, topic: topic, high: high, tables: tables, txn) { result.formUnion(slice) }
        }
        return result
    }
}
