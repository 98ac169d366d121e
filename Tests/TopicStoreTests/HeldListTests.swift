import CIntrinsics
import Foundation
import LMDB
@testable import Projections
import SubscriptionLog
import Testing

/// A list's held per-user topics looked up and gathered in C
/// (`topicstore_gather_held`, `topicstore_distinct_reaches`): the same
/// memory as the Swift types, the same hashes as `NameIndex`, and the same
/// answers as the Swift path (`TopicCache.gatherMembers`) and a plain model.
@Suite struct HeldListTests {
    @Test func theCStructsAreTheSwiftOnesLayout() {
        #expect(MemoryLayout<NameIndex.Slot>.stride == 32)
        #expect(MemoryLayout<topicstore_held_entry>.size == 32)
        #expect(MemoryLayout<topicstore_held_entry>.offset(of: \.count) == 24)
        #expect(MemoryLayout<topicstore_held_entry>.offset(of: \.reaches) == 28)
        #expect(TopicCache.validityMatchesC, "Validity and InlineMembers as topicstore_held_entry has them")
    }

    /// A short name's hash from its two words (as a list's lookups in C and
    /// Swift take it) is its hash from its bytes (as a name not held in a small
    /// String was set), for every length up to 16.
    @Test func aShortNamesHashFromItsWordsIsItsHashFromItsBytes() {
        var rng = SystemRandomNumberGenerator()
        for n in 0...16 {
            for _ in 0..<300 {
                let bytes = (0..<n).map { _ in UInt8.random(in: 0x21...0x7E, using: &rng) }
                let pid = UInt32.random(in: 0...UInt32.max, using: &rng)
                bytes.withUnsafeBytes { raw in
                    let words = n == 0 ? (UInt64(0), UInt64(0)) : NameIndex.shortWords(raw.baseAddress!, n)
                    #expect(NameIndex.nameHash(shortWords: words, count: n) == NameIndex.nameHash(raw), "\(bytes)")
                    #expect(NameIndex.shortTag(pid, words, n) == UInt32(truncatingIfNeeded: NameIndex.hash(pid, raw) >> 32), "\(bytes)")
                }
            }
        }
    }

    /// Codes of every length a small String has, and a short one that is not
    /// small: each found from the String (its value read in C), or from its
    /// bytes, or by Swift's lookups beyond a slot's 12 bytes, and gathered.
    @Test func everyLengthOfCodeIsGatheredFromItsString() {
        let cache = TopicCache(capacity: 64)
        cache.beginWrite(at: 3, snapshot: 9)
        cache.noteProject("app", id: 1)
        let letters = Array("abcdefghijklmnopqrstuvwxyz")
        let codes: [String] = (1...15).map { (n: Int) -> String in
            String((0..<n).map { (i: Int) -> Character in letters[(i * 7 + n) % 26] })
        }
        for (k, code) in codes.enumerated() { cache.offer(1, code: code, .members(tid: UInt32(100 + k), [UInt32(k)]), readAt: 3) }
        // A String of 5 bytes in storage of its own, not small.
        let stored = String(unsafeUninitializedCapacity: 64) { buffer in
            for (i, b) in "store".utf8.enumerated() { buffer[i] = b }
            return 5
        }
        #expect(stored == "store" && stored.smallUTF8Words == nil, "a String C cannot read from its value")
        cache.offer(1, code: "store", .members(tid: 99, [42]), readAt: 3)
        for (k, code) in codes.enumerated() {
            var gathered = GatheredMembers(limit: 4)
            #expect(code.smallUTF8Words?.count == code.utf8.count)
            #expect(cache.gatherHeldMembers(project: "app", codes: [code, code], tip: 9, into: &gathered) != nil, "\(code)")
            #expect(gathered.withValues { Array($0) } == [UInt32(k), UInt32(k)], "\(code)")
        }
        var all = GatheredMembers(limit: 64)
        #expect(cache.gatherHeldMembers(project: "app", codes: codes + [stored], tip: 9, into: &all) != nil)
        #expect(all.withValues { Array($0) } == (0..<15).map(UInt32.init) + [42])
        var missing = GatheredMembers(limit: 64)
        #expect(cache.gatherHeldMembers(project: "app", codes: Array(codes[..<12]) + ["user.1"], tip: 9, into: &missing) == nil)
    }

    /// Random directories and lists: held topics of up to four members (what
    /// each reaches held), shared topics held by their slices, topics dropped
    /// by a commit, codes never offered, codes too long for a slot (which
    /// Swift gathers), codes not in ASCII, lists that do not fit. A list is
    /// gathered whole (`gatherHeldMembers`, up to its first miss) exactly when
    /// the model holds all of its topics and they fit, and topic by topic
    /// (`gatherMembers`) exactly as the model's members fit in turn; the
    /// members' counts by platform are the model's.
    @Test func aListIsGatheredAsTheModelGathersIt() throws {
        let dir = TemporaryDirectory()
        var options = Environment.Options()
        options.maxDatabases = 32
        let env = try Environment(path: dir.path, options: options)
        let tables = try ProjectionTables.open(in: env, create: true)
        var rng = SystemRandomNumberGenerator()

        for round in 0..<6 {
            let recipients = RecipientCache()
            let cache = TopicCache(capacity: 1024, sharingLockWith: recipients)
            try env.read { txn in try recipients.fill(from: tables, through: 0, txn) }
            // Devices 0..<80 of project 1: a live iOS or Android token, or none.
            var changes = RecipientCache.Changes()
            var platforms: [UInt32: Platform] = [:]
            for ordinal in UInt32(0)..<80 {
                let device: DeviceRecord
                switch Int.random(in: 0..<3, using: &rng) {
                case 0:
                    device = DeviceRecord(deviceID: "d\(ordinal)", token: "t\(ordinal)", platform: .ios, tokenTime: 1)
                    platforms[ordinal] = .ios
                case 1:
                    device = DeviceRecord(deviceID: "d\(ordinal)", token: "t\(ordinal)", platform: .android, tokenTime: 1)
                    platforms[ordinal] = .android
                default: device = DeviceRecord(deviceID: "d\(ordinal)")
                }
                var bytes = [UInt8](repeating: 0, count: device.maximumEncodedSize)
                let n = bytes.withUnsafeMutableBytes { device.encode(into: $0.baseAddress!) }
                bytes.withUnsafeBytes { changes.put(1, ordinal, sequence: 3, record: UnsafeRawBufferPointer(rebasing: $0[..<n])) }
            }
            recipients.apply(changes, from: 0, through: 3)
            cache.beginWrite(at: 3, snapshot: 20)
            cache.noteProject("app", id: 1)
            cache.noteProject("other", id: 2)

            // Codes: short ones (held in their slot; some not ASCII), and some too long for it.
            let codes = (0..<300).map { $0 % 7 == 6 ? "a-long-topic-\($0)" : $0 % 7 == 5 ? "é.\($0)" : "u.\($0)" }
            var model: [String: [UInt32]] = [:]
            for (k, code) in codes.enumerated() where k % 10 != 9 {  // every tenth never offered
                let tid = UInt32(1 << 31) + UInt32(k)
                if k % 13 == 0 {
                    cache.offer(1, code: code, .slices(tid: tid, [0, 1]), readAt: 3)
                } else {
                    let members = (0..<Int.random(in: 0...4, using: &rng)).map { _ in UInt32.random(in: 0..<80, using: &rng) }
                    cache.offer(1, code: code, .members(tid: tid, members), readAt: 3)
                    model[code] = members
                }
                // The same code in another project holds another member.
                if k % 5 == 0 { cache.offer(2, code: code, .members(tid: tid, [79]), readAt: 3) }
            }
            // A commit drops some of them; it is LMDB's transaction 21.
            let dropped = codes.indices.filter { $0 % 11 == round }
            cache.didCommit(changing: dropped.map { 1 << 32 | UInt64(1 << 31 + $0) }, from: 3, through: 4, transaction: 21)
            for k in dropped { model[codes[k]] = nil }

            var gatheredBoth = 0
            for list in 0..<400 {
                // Half the lists from codes the model holds (so most are gathered), half from any.
                let held = model.keys.filter { $0.utf8.count <= NameIndex.inlineName }
                let pool = list % 2 == 0 ? held : codes
                let names = (0..<Int.random(in: 2...40, using: &rng)).map { _ in pool.randomElement(using: &rng)! }
                let limit = list % 9 == 0 ? Int.random(in: 0...(4 * names.count), using: &rng) : 4 * names.count
                // The model: a list gathered up to its first miss, or each topic that fits in turn.
                let want = names.map { model[$0] }
                let fits = want.reduce(0) { $0 + ($1?.count ?? 0) } <= limit
                var eachValues: [UInt32] = [], eachMissed: [Int] = []
                for (i, members) in want.enumerated() {
                    if let members, eachValues.count + members.count <= limit { eachValues += members } else { eachMissed.append(i) }
                }
                func reached(_ values: [UInt32]) -> (Int, Int, Int, Int) {
                    let distinct = Set(values)
                    return (distinct.count, distinct.filter { platforms[$0] == .ios }.count,
                            distinct.filter { platforms[$0] == .android }.count, 0)
                }

                var listed = GatheredMembers(limit: limit)
                let c = cache.gatherHeldMembers(project: "app", codes: names, tip: 21, into: &listed)
                #expect((c != nil) == (want.allSatisfy { $0 != nil } && fits), "\(names)")
                var each = GatheredMembers(limit: limit)
                let missed = cache.gatherMembers(1, codes: names, asOf: 4, into: &each)
                #expect(missed == eachMissed, "\(names)")
                #expect(each.withValues { Array($0) } == eachValues, "\(names)")
                #expect(each.distinctReaches() == reached(eachValues), "\(names)")
                guard let c else { continue }
                gatheredBoth += 1
                #expect(c.pid == 1 && c.asOf == 4)
                let values = listed.withValues { Array($0) }
                #expect(values == want.flatMap { $0! })
                #expect(listed.distinctReaches() == reached(values), "\(names)")
            }
            #expect(gatheredBoth > 100)
            // Another transaction than the one the directory holds: not answered.
            var stale = GatheredMembers(limit: 8)
            #expect(cache.gatherHeldMembers(project: "app", codes: ["u.1", "u.2"], tip: 20, into: &stale) == nil)
        }
    }
}
