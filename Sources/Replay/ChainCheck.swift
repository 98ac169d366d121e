import SubscriptionLog

/// Follows the hash chain over records read in order, so that the commands
/// that read the log without a full audit (`replay`, `history`, `export`)
/// refuse a record altered with its checksum recomputed, as `audit` does,
/// instead of answering from it.
///
/// A version 1 record carries no link: the chain is taken up again, unverified,
/// at the next record that stores its whole link (as the audit reports such
/// records `unchained` and goes on; a version 5 record keeps only 8 bytes of it).
struct ChainCheck: Sendable {
    /// The link the next record must extend; nil when it is not known.
    private(set) var link: ChainHash?

    /// Starting at the log's first record (`ChainHash.genesis`), at a compaction
    /// snapshot's head, or at a record's stored link.
    init(after link: ChainHash?) { self.link = link }

    /// `check` and then `RecordCodec.decode`, in one pass where the link is
    /// known (`RecordCodec.decodeVerifyingLink`), the record's device_ids and
    /// tokens spelled into `names` for the fold.
    mutating func checkAndDecode(_ bytes: UnsafeRawBufferPointer, key: UInt64, names: NameArena) throws -> FoldRecord {
        guard let previous = link else {
            try check(bytes, key: key)
            return try RecordCodec.decode(bytes, key: key, names: names)
        }
        do {
            let (record, next) = try RecordCodec.decodeVerifyingLink(bytes, key: key, previous: previous, names: names)
            link = next
            return record
        } catch let e as RecordCorruption where e.kind == .unchained {
            link = nil
            return try RecordCodec.decode(bytes, key: key, names: names)
        }
    }

    /// Checks the record under `key` and moves on to its link; a broken link is
    /// thrown as a `RecordCorruption` of kind `.chain` naming the sequence.
    mutating func check(_ bytes: UnsafeRawBufferPointer, key: UInt64) throws {
        guard let previous = link else {
            link = try RecordCodec.storedLink(of: bytes, key: key)
            return
        }
        do {
            link = try RecordCodec.verifyLink(of: bytes, key: key, previous: previous)
        } catch let e as RecordCorruption where e.kind == .unchained {
            link = nil
        }
    }
}
