/// Topic codes recently resolved to ids, in 4,096 direct-mapped entries
/// (96 KiB): a few codes recur in almost every register, and this is a
/// compare of two words where a name-table or dictionary lookup (UTF-8 view,
/// hash, probe, compare) was ~240 instructions and, in a table that also holds
/// a million per-user codes, a cache miss. With Zipf-popular topics, 64
/// entries caught about half of the lookups. Holds only codes that exist:
/// the writer forgets them all whenever a topic is dropped or its caches are
/// (another writer wrote, a transaction did not commit, a build was written).
///
/// A class: read through the writer's reference in place, where an array in
/// a struct held by a class was copied (retained and released) on every lookup.
final class RecentTopicCodes {
    private struct Entry {
        var pid: UInt32 = 0
        var tid: UInt32 = 0
        var generation: UInt32 = 0
        var code: String?
    }
    private static let bits = 12
    private var entries = [Entry](repeating: Entry(), count: 1 << RecentTopicCodes.bits)
    /// Only entries of this generation count: forgetting them all is one increment.
    private var generation: UInt32 = 1

    /// The entry for `code`: chosen by the string's own two words (its bytes
    /// for a short code; a long one's object address only spreads them), so
    /// no hash of its UTF-8 is needed. Equality is still checked in full.
    @inline(__always)
    private static func index(_ pid: UInt32, _ code: String) -> Int {
        let words = unsafeBitCast(code, to: (UInt64, UInt64).self)
        let h = (words.0 ^ words.1 &* 0x9E37_79B9_7F4A_7C15 ^ UInt64(pid)) &* 0xBF58_476D_1CE4_E5B9
        return Int(truncatingIfNeeded: h >> (64 - UInt64(bits)))
    }

    @inline(__always)
    func topicID(_ pid: UInt32, code: String) -> UInt32? {
        let e = entries[Self.index(pid, code)]
        guard e.generation == generation, e.pid == pid, let held = e.code, held == code else { return nil }
        return e.tid
    }

    func remember(_ pid: UInt32, code: String, _ tid: UInt32) {
        entries[Self.index(pid, code)] = Entry(pid: pid, tid: tid, generation: generation, code: code)
    }

    func forgetAll() {
        generation &+= 1
        if generation == 0 {  // wrapped: entries of generation 1 must not come back
            for i in entries.indices { entries[i] = Entry() }
            generation = 1
        }
    }
}
