@testable import Projections
import Testing

/// The recipient cache's columns by project id (`RecipientCache.ColumnsByProject`):
/// an array for the ids a file gives (1 up), a dictionary beyond, answering
/// as a dictionary would.
@Suite struct ColumnsByProjectTests {
    typealias Column = RecipientCache.Column

    /// A column told apart from others by its memory and length.
    static func column(_ cells: Int) -> Column {
        var c = Column()
        c.set(UInt32(cells - 1), handle: nil, reach: .none, changed: 1)
        return c
    }

    static func same(_ a: Column?, _ b: Column?) -> Bool {
        a?.cells.baseAddress == b?.cells.baseAddress && a?.cells.count == b?.cells.count
    }

    /// Random sets, replacements and removals across ids in the array, at its
    /// edge and far beyond it leave what a dictionary holds, id by id, and
    /// the same ids and columns listed.
    @Test func answersAsADictionary() {
        let limit = UInt32(RecipientCache.ColumnsByProject.denseIDs)
        let ids: [UInt32] = [0, 1, 2, 3, 7, 64, limit - 2, limit - 1, limit, limit + 1, 100_000, UInt32.max]
        var generator = SeededRandom(seed: 42)
        var ours = RecipientCache.ColumnsByProject()
        var model: [UInt32: Column] = [:]
        var made: [Column] = []
        for step in 0..<2_000 {
            let pid = generator.pick(ids)
            switch generator.int(4) {
            case 0, 1:
                let c = Self.column(generator.int(40) + 1)
                made.append(c)
                ours[pid] = c
                model[pid] = c
            case 2:
                #expect(Self.same(ours.removeValue(forKey: pid), model.removeValue(forKey: pid)), "step \(step): remove \(pid)")
            default:
                ours[pid] = nil
                model[pid] = nil
            }
            for id in ids {
                #expect(Self.same(ours[id], model[id]), "step \(step): id \(id)")
            }
            #expect(ours.pids.sorted() == model.keys.sorted(), "step \(step)")
            #expect(ours.all.map { $0.cells.baseAddress }.sorted { $0! < $1! } == model.values.map { $0.cells.baseAddress }.sorted { $0! < $1! })
        }
        for c in made { c.free() }
    }

    /// An id never set is absent, in the array's range and beyond it, and
    /// removing it leaves nothing behind.
    @Test func absentIDs() {
        var ours = RecipientCache.ColumnsByProject()
        #expect(ours[1] == nil && ours[UInt32.max] == nil)
        #expect(ours.removeValue(forKey: 5) == nil && ours.removeValue(forKey: 1 << 20) == nil)
        let c = Self.column(3)
        ours[9] = c
        #expect(ours[8] == nil && ours[10] == nil && Self.same(ours[9], c))
        #expect(ours.pids == [9] && ours.all.count == 1)
        ours.free()
    }
}
