/// Where `RecordCodec.writeFields` puts a record's fields, in their order:
/// one description of the format, two uses. `FieldMeasure` counts the bytes
/// (and refuses a field too long for its length), `FieldStore` then writes
/// them in place into a buffer of that size.
///
/// Every record is encoded twice (the stored version 4 form and the version 2
/// form its chain link covers), by `RecordCodec.prepare` on the submitting
/// caller's thread; appending field by field to growing arrays took about
/// 4,300 instructions a record (callgrind, when the writer thread of `load`
/// still did it).
protocol FieldSink {
    mutating func u8(_ v: UInt8)
    mutating func u64(_ v: UInt64)
    mutating func i64(_ v: Int64)
    /// A string as u16 length and UTF-8 bytes.
    mutating func string(_ s: String, field: @autoclosure () -> String) throws(FieldTooLong)
    /// A device_id or token as a `StoredName`.
    mutating func name(_ s: String, field: @autoclosure () -> String) throws(FieldTooLong)
    /// A list's length as u16.
    mutating func count(_ n: Int, field: @autoclosure () -> String) throws(FieldTooLong)
    /// Version 4: the sequence is not stored (the key holds it; the version 2 form has it as u64).
    mutating func omittedSequence()
    /// Version 4: the timestamp as u48 (the version 2 form has it as i64).
    mutating func time48(_ v: Int64)
    /// Version 4: a string as a short length (`ShortLength`) and UTF-8 bytes (u16 length in the version 2 form).
    mutating func shortString(_ s: String, field: @autoclosure () -> String) throws(FieldTooLong)
    /// Version 4: a list's length as a short length (u16 in the version 2 form).
    mutating func shortCount(_ n: Int, field: @autoclosure () -> String) throws(FieldTooLong)
}

/// A length in version 4: one byte for 0…254, else 255 and a u16 of 255…65535.
/// Each length has exactly one form (a smaller one behind the escape is refused on reading).
enum ShortLength {
    static let escape: UInt8 = 255
    static func size(_ n: Int) -> Int { n < Int(escape) ? 1 : 3 }
}

/// Counts the bytes the fields take, refusing them as `ByteWriter` does; also
/// the bytes of the same fields in the version 2 form (every name as a string,
/// the sequence, an i64 timestamp, u16 lengths), so one pass sizes both forms.
struct FieldMeasure: FieldSink {
    private(set) var size = 0
    /// The same fields' size in the version 2 form.
    private(set) var version2Size = 0

    mutating func u8(_ v: UInt8) { size += 1; version2Size += 1 }
    mutating func u64(_ v: UInt64) { size += 8; version2Size += 8 }
    mutating func i64(_ v: Int64) { size += 8; version2Size += 8 }

    mutating func string(_ s: String, field: @autoclosure () -> String) throws(FieldTooLong) {
        let n = s.utf8.count
        guard n <= FieldTooLong.limit else { throw FieldTooLong(field: field(), bytes: n) }
        size += 2 + n
        version2Size += 2 + n
    }

    mutating func name(_ s: String, field: @autoclosure () -> String) throws(FieldTooLong) {
        let n = s.utf8.count
        guard n <= FieldTooLong.limit else { throw FieldTooLong(field: field(), bytes: n) }
        size += StoredName.plan(s).size
        version2Size += 2 + n
    }

    mutating func count(_ n: Int, field: @autoclosure () -> String) throws(FieldTooLong) {
        guard n <= FieldTooLong.limit else { throw FieldTooLong(field: field(), bytes: n, isCount: true) }
        size += 2
        version2Size += 2
    }

    mutating func omittedSequence() { version2Size += 8 }
    mutating func time48(_ v: Int64) { size += 6; version2Size += 8 }

    mutating func shortString(_ s: String, field: @autoclosure () -> String) throws(FieldTooLong) {
        let n = s.utf8.count
        guard n <= FieldTooLong.limit else { throw FieldTooLong(field: field(), bytes: n) }
        size += ShortLength.size(n) + n
        version2Size += 2 + n
    }

    mutating func shortCount(_ n: Int, field: @autoclosure () -> String) throws(FieldTooLong) {
        guard n <= FieldTooLong.limit else { throw FieldTooLong(field: field(), bytes: n, isCount: true) }
        size += ShortLength.size(n)
        version2Size += 2
    }
}

/// Writes the fields at `base`, which has room for what `FieldMeasure` counted
/// for the same record and version; it refuses nothing (the measure did).
struct FieldStore: FieldSink {
    let base: UnsafeMutableRawPointer
    private(set) var at = 0

    init(_ base: UnsafeMutableRawPointer) { self.base = base }

    mutating func u8(_ v: UInt8) {
        base.storeBytes(of: v, toByteOffset: at, as: UInt8.self)
        at += 1
    }
    mutating func u16(_ v: UInt16) {
        base.storeBytes(of: v.bigEndian, toByteOffset: at, as: UInt16.self)
        at += 2
    }
    mutating func u64(_ v: UInt64) {
        base.storeBytes(of: v.bigEndian, toByteOffset: at, as: UInt64.self)
        at += 8
    }
    mutating func i64(_ v: Int64) { u64(UInt64(bitPattern: v)) }

    mutating func string(_ s: String, field: @autoclosure () -> String) {
        s.withUTF8Bytes { utf8 in
            u16(UInt16(truncatingIfNeeded: utf8.count))
            if utf8.count > 0 { (base + at).copyMemory(from: utf8.baseAddress!, byteCount: utf8.count) }
            at += utf8.count
        }
    }

    mutating func name(_ s: String, field: @autoclosure () -> String) {
        StoredName.write(s, StoredName.plan(s).form, at: base, &at)
    }

    mutating func count(_ n: Int, field: @autoclosure () -> String) { u16(UInt16(truncatingIfNeeded: n)) }

    mutating func omittedSequence() {}

    mutating func time48(_ v: Int64) {
        let u = UInt64(bitPattern: v)
        base.storeBytes(of: UInt16(truncatingIfNeeded: u >> 32).bigEndian, toByteOffset: at, as: UInt16.self)
        base.storeBytes(of: UInt32(truncatingIfNeeded: u).bigEndian, toByteOffset: at + 2, as: UInt32.self)
        at += 6
    }

    private mutating func shortLength(_ n: Int) {
        if n < Int(ShortLength.escape) {
            u8(UInt8(truncatingIfNeeded: n))
        } else {
            u8(ShortLength.escape)
            u16(UInt16(truncatingIfNeeded: n))
        }
    }

    mutating func shortString(_ s: String, field: @autoclosure () -> String) {
        s.withUTF8Bytes { utf8 in
            shortLength(utf8.count)
            if utf8.count > 0 { (base + at).copyMemory(from: utf8.baseAddress!, byteCount: utf8.count) }
            at += utf8.count
        }
    }

    mutating func shortCount(_ n: Int, field: @autoclosure () -> String) { shortLength(n) }
}
