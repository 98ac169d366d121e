@testable import Projections
import Roaring
import Testing

/// The writer's posting chunks: up to three members inline, a bitmap beyond.
/// Whatever held a set, it must behave as a set and store the bytes
/// `Bitmap.writeChunk` stores for it (CRoaring's container), or a rebuild and
/// the live path would write different chunks for the same members.
@Suite struct PostingSetTests {
    /// Random inserts and removals in one slice, dense enough that sets of
    /// 1–3 members are often runs (consecutive ordinals), checked after every
    /// step against a Swift set and against CRoaring's bytes for that set: the
    /// compact chunk `Bitmap` writes, and, given back its portable header, the
    /// portable bytes CRoaring writes.
    @Test(arguments: [1, 2, 3, 4] as [UInt64])
    func matchesASetAndCRoaringsBytes(seed: UInt64) {
        var rng = SeededRandom(seed: seed)
        for _ in 0..<300 {
            let high = UInt32(rng.int(4) == 0 ? 0 : rng.int(65_536))
            let span = UInt32([4, 8, 65_536][rng.int(3)])
            var set = PostingSet()
            var model = Set<UInt32>()
            for _ in 0..<20 {
                let ordinal = high << 16 | (UInt32(rng.int(Int(span))) + (span == 65_536 ? 0 : 65_528)) & 0xFFFF
                let inserting = rng.int(3) != 0
                let changed = inserting ? set.insert(ordinal) : set.remove(ordinal)
                let expected = inserting ? model.insert(ordinal).inserted : model.remove(ordinal) != nil
                #expect(changed == expected)
                #expect(set.count == model.count)
                #expect(set.isEmpty == model.isEmpty)
                #expect(set.toArray() == model.sorted())
                #expect(model.allSatisfy { set.contains($0) })
                if !model.isEmpty {
                    var reference = Bitmap(model.sorted())
                    reference.optimize()
                    var copy = set
                    copy.optimize()
                    let chunk = copy.chunk()
                    #expect(copy.chunkSize == reference.chunkSize)
                    #expect(chunk == reference.chunk(), "members \(model.sorted())")
                    #expect(chunk.count <= reference.serializedSize - 9, "the compact chunk is smaller")
                    let portable = try? chunk.withUnsafeBytes { try Bitmap(chunk: $0, high: UInt16(high)) }
                    #expect(portable?.serialized() == reference.serialized(), "members \(model.sorted())")
                }
            }
        }
    }

    /// The inline form is what a new chunk starts as, and what every one- to
    /// three-member set (runs included) is stored like, read back by CRoaring.
    @Test func smallSetsStayInlineAndDecodeWithCRoaring() throws {
        for members in [[7], [65_535], [3, 4], [1 << 16 | 9, 1 << 16 | 10, 1 << 16 | 11], [5, 900, 65_000]] as [[UInt32]] {
            var set = PostingSet()
            for m in members {
                let inserted = set.insert(m)
                #expect(inserted)
            }
            guard case .few = set.storage else { Issue.record("\(members) left the inline form"); continue }
            let decoded = try set.chunk().withUnsafeBytes { try Bitmap(chunk: $0, high: UInt16(members[0] >> 16)) }
            #expect(decoded.toArray() == members)
        }
        var set = PostingSet()
        for m in [1, 2, 3, 4] as [UInt32] { set.insert(m) }
        guard case .bitmap = set.storage else { Issue.record("a fourth member stayed inline"); return }
        #expect(set.toArray() == [1, 2, 3, 4])
    }

    /// Whether a change found the set empty (an insert) or left it empty (a
    /// remove) is what makes a chunk appear in or leave its topic's slice list:
    /// told by the change itself, in both forms.
    @Test func changesTellWhenTheSetWasOrBecomesEmpty() {
        for start in [PostingSet(), PostingSet(Bitmap())] {
            var set = start
            #expect(set.insertNotingEmpty(5) == (true, true))
            #expect(set.insertNotingEmpty(5) == (false, false))
            for m in [6, 7, 8, 9] as [UInt32] { #expect(set.insertNotingEmpty(m) == (true, false)) }  // the bitmap form from the fourth
            for m in [5, 6, 7, 8] as [UInt32] { #expect(set.removeNotingEmpty(m) == (true, false)) }
            #expect(set.removeNotingEmpty(4).removed == false)
            #expect(set.removeNotingEmpty(9) == (true, true))
            #expect(set.isEmpty && set.insertNotingEmpty(1) == (true, true))
        }
    }

    /// A bitmap changed through the set is changed in place: a copy taken
    /// before does not see the change (value semantics), and the set does.
    @Test func bitmapsKeepValueSemantics() {
        var set = PostingSet(Bitmap([1, 2, 3, 4, 5] as [UInt32]))
        let before = set
        let inserted = set.insert(6), removed = set.remove(1)
        #expect(inserted && removed)
        #expect(before.toArray() == [1, 2, 3, 4, 5])
        #expect(set.toArray() == [2, 3, 4, 5, 6])
    }
}

/// A topic's bitmap reads only the slice list of its record, in place.
@Suite struct TopicRecordSliceTests {
    @Test func slicesReadInPlaceEqualTheDecodedOnes() throws {
        var rng = SeededRandom(seed: 12)
        for _ in 0..<200 {
            var record = TopicRecord(code: String(repeating: "c", count: rng.int(40)), title: String(repeating: "é", count: rng.int(30)),
                                     single: rng.int(2) == 0, subscribers: UInt32(rng.int(1000)), createdSeq: 1, lastChangeSeq: 2)
            record.slices = (0..<rng.int(20)).map { _ in UInt16(rng.int(65_536)) }.sorted()
            let bytes = record.encoded()
            let stored = bytes.withUnsafeBytes { b in TopicRecord.storedSlices(of: b).map { ($0.count, Array($0)) } }
            let inPlace = stored?.1
            #expect(stored?.0 == record.slices.count)
            #expect(inPlace == record.slices)
            #expect(inPlace == (try bytes.withUnsafeBytes { try TopicRecord(decoding: $0, at: "t") }).slices)
            // Cut short or padded, the bytes are not a record.
            #expect(Array(bytes.dropLast()).withUnsafeBytes { TopicRecord.storedSlices(of: $0) } == nil)
            #expect((bytes + [0]).withUnsafeBytes { TopicRecord.storedSlices(of: $0) } == nil)
        }
    }
}
