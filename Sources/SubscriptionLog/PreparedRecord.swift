/// An event's log record encoded before it has a sequence, a time and a
/// link: its stored (version 5) fields with the timestamp left zero, then the
/// rest of its version 2 form (after the header), which the chain link covers.
///
/// A caller prepares its commands on its own thread (`RecordCodec.prepare`);
/// the one writer thread only writes the sequence and time, computes the link
/// and the CRC, and copies the bytes into the log (`RecordCodec.seal`). The
/// encoding (measuring the fields, writing both forms) was about a tenth of
/// the writer thread's instructions in a `load` (callgrind).
public struct PreparedRecord: Sendable {
    /// The stored fields (`storedCount` bytes), then the version 2 fields after
    /// their header (version, type, sequence, timestamp: written when sealed).
    let bytes: [UInt8]
    let storedCount: Int

    /// The bytes of the record sealed under `sequence`: its fields, the chain
    /// link (its first 8 bytes, or all of it every `fullLinkInterval` records) and the CRC.
    public func sealedCount(at sequence: UInt64) -> Int {
        sealedCount(version: RecordCodec.writtenVersion(at: sequence))
    }

    /// The bytes of the record sealed in `version` (4 or 5).
    func sealedCount(version: UInt8) -> Int { storedCount + RecordCodec.trailerSize(version) }
}

extension RecordCodec {
    /// version, type, sequence, timestamp: the fields before the project in versions 1 to 3.
    static let headerSize = 1 + 1 + 8 + 8
    /// version, type, u48 timestamp: the fields before the project in version 4.
    static let compactHeaderSize = 1 + 1 + 6

    /// Encodes `event`'s fields in both forms, to be sealed with a sequence and a
    /// time later. A string or list too long for its u16 length is thrown.
    public static func prepare(_ event: Event) throws(FieldTooLong) -> PreparedRecord {
        let record = LogRecord(sequence: 0, timestamp: 0, event: event)
        var measure = FieldMeasure()
        try writeFields(record, version: currentVersion, into: &measure)
        let stored = measure.size
        let total = stored + measure.version2Size - headerSize
        let bytes = [UInt8](unsafeUninitializedCapacity: total) { buffer, initialized in
            let base = UnsafeMutableRawPointer(buffer.baseAddress!)
            var store = FieldStore(base)
            try! writeFields(record, version: currentVersion, into: &store)  // measured: nothing is refused
            precondition(store.at == stored, "a record's fields took other than their measure")
            // The version 2 form goes to scratch space; all of it but its header after the stored form.
            withUnsafeTemporaryAllocation(byteCount: measure.version2Size, alignment: 8) { scratch in
                var canonical = FieldStore(scratch.baseAddress!)
                try! writeFields(record, version: 2, into: &canonical)
                precondition(canonical.at == measure.version2Size, "a record's version 2 form took other than its measure")
                (base + stored).copyMemory(from: scratch.baseAddress! + headerSize, byteCount: canonical.at - headerSize)
            }
            initialized = total
        }
        return PreparedRecord(bytes: bytes, storedCount: stored)
    }

    /// Writes `prepared` with `sequence` and `timestamp` (0…2^48 − 1, as the
    /// writer's clock always is) into `out` (exactly `sealedCount(at: sequence)`
    /// bytes), chained to `previous`, and advances `previous` to its link: the
    /// same bytes as `encode` of that record, to be stored under `sequence`.
    public static func seal(_ prepared: borrowing PreparedRecord, sequence: UInt64, timestamp: Int64,
                            chainingFrom previous: inout ChainHash, into out: UnsafeMutableRawBufferPointer) {
        seal(prepared, sequence: sequence, timestamp: timestamp, version: writtenVersion(at: sequence),
             chainingFrom: &previous, into: out)
    }

    /// `seal` in `version`: 5 (the link's first 8 bytes kept) or 4 (all of it).
    static func seal(_ prepared: borrowing PreparedRecord, sequence: UInt64, timestamp: Int64, version: UInt8,
                     chainingFrom previous: inout ChainHash, into out: UnsafeMutableRawBufferPointer) {
        precondition(isCompact(version), "a prepared record is sealed in version 4 or 5")
        precondition(out.count == prepared.sealedCount(version: version), "a sealed record takes exactly its size")
        precondition(time48Range.contains(timestamp), "a version 4 or 5 record's timestamp fits in 48 bits")
        let n = prepared.storedCount
        let kept = linkSize(version)
        let p = out.baseAddress!
        prepared.bytes.withUnsafeBytes { b in
            p.copyMemory(from: b.baseAddress!, byteCount: n)
            p.storeBytes(of: version, as: UInt8.self)
            var time48 = FieldStore(p + 2)
            time48.time48(timestamp)
            let time = UInt64(bitPattern: timestamp)
            // The link covers the version 2 form: its header (version byte 2, the type,
            // the sequence, the timestamp as i64), then the rest of that form.
            var header: (UInt64, UInt64, UInt16) = (0, 0, 0)
            let link = withUnsafeMutableBytes(of: &header) { h in
                h[0] = 2
                h[1] = p.load(fromByteOffset: 1, as: UInt8.self)
                h.storeBytes(of: sequence.bigEndian, toByteOffset: 2, as: UInt64.self)
                h.storeBytes(of: time.bigEndian, toByteOffset: 10, as: UInt64.self)
                return previous.next(over: UnsafeRawBufferPointer(rebasing: h[0..<headerSize]),
                                     UnsafeRawBufferPointer(rebasing: b[n...]))
            }
            link.withUnsafeBytes { (p + n).copyMemory(from: $0.baseAddress!, byteCount: kept) }
            previous = link
        }
        let crc = keyedChecksum(UnsafeRawBufferPointer(start: p, count: n + kept), key: sequence)
        (p + n + kept).storeBytes(of: crc.bigEndian, as: UInt32.self)
    }
}
