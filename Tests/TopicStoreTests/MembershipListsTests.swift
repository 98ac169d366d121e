@testable import Projections
import Testing

/// The writer's topic lists of devices held in one arena (`MembershipLists`):
/// each list ascending, changed in place while it has room, moved to the
/// arena's end when it outgrows it, and read from another thread through a
/// snapshot that later changes do not touch.
@Suite struct MembershipListsTests {
    typealias Key = ProjectionWriter.DeviceKey

    /// Every insertion and removal, at every place of lists of 0–12 ids, with
    /// room to spare and without, leaves what `Array`'s own `insert(_:at:)`
    /// and `remove(at:)` leave.
    @Test func insertAndRemoveAtEveryPlace() {
        for length in 0...12 {
            let list = (0..<length).map { UInt32($0 * 10 + 5) }
            for extra in [0, 1, length + 4] {
                for newID in stride(from: UInt32(0), through: UInt32(length * 10 + 10), by: 10) {
                    var lists = MembershipLists()
                    let slot = lists.appendUnindexed(Key(pid: 1, ordinal: 0), list)
                    lists.reserveRoom(at: slot, for: extra)
                    var expected = list
                    expected.insert(newID, at: expected.firstIndex { $0 > newID } ?? expected.count)
                    let inserted = lists.insert(newID, intoListAt: slot)
                    #expect(inserted)
                    #expect(lists.list(at: slot) == expected, "insert \(newID) into \(list)")
                    let again = lists.insert(newID, intoListAt: slot)
                    #expect(!again, "inserted twice")
                }
                for index in list.indices {
                    var lists = MembershipLists()
                    let slot = lists.appendUnindexed(Key(pid: 1, ordinal: 0), list)
                    lists.reserveRoom(at: slot, for: extra)
                    var expected = list
                    let removed = expected.remove(at: index)
                    let gone = lists.remove(removed, fromListAt: slot)
                    #expect(gone)
                    #expect(lists.list(at: slot) == expected, "remove at \(index) of \(list)")
                    let again = lists.remove(removed, fromListAt: slot)
                    #expect(!again, "removed twice")
                }
            }
        }
    }

    /// Random changes to many lists at once, checked against sets: lists
    /// that move (outgrowing their room) leave the others as they were.
    @Test func manyListsEqualAModel() {
        var random = SeededRandom(seed: 21)
        for round in 0..<4 {
            var lists = MembershipLists()
            var model: [Set<UInt32>] = []
            var slots: [Int] = []
            for ordinal in 0..<300 {
                let start = Set((0..<random.int(5)).map { _ in UInt32(random.int(60)) })
                let key = Key(pid: UInt32(1 + round % 2), ordinal: UInt32(ordinal))
                let slot = round % 2 == 0 ? lists.appendUnindexed(key, start.sorted()) : lists.insert(key, start.sorted())
                slots.append(slot)
                model.append(start)
            }
            for step in 0..<20_000 {
                let i = random.int(slots.count), tid = UInt32(random.int(60))
                switch random.int(7) {
                case 0:
                    lists.reserveRoom(at: slots[i], for: random.int(6))
                case 1, 2:
                    let removed = model[i].remove(tid) != nil
                    let ours = lists.remove(tid, fromListAt: slots[i])
                    #expect(ours == removed)
                default:
                    let inserted = model[i].insert(tid).inserted
                    let ours = lists.insert(tid, intoListAt: slots[i])
                    #expect(ours == inserted)
                }
                if step % 1_000 == 999 {
                    for j in slots.indices { #expect(lists.list(at: slots[j]) == model[j].sorted(), "list \(j) at step \(step)") }
                }
            }
            #expect(lists.abandoned > 0, "no list moved")
            if round % 2 == 1 {
                for (ordinal, slot) in slots.enumerated() { #expect(lists.slot(of: Key(pid: 2, ordinal: UInt32(ordinal))) == slot) }
                #expect(lists.slot(of: Key(pid: 1, ordinal: 0)) == nil)
            }
            lists.removeAll()
            #expect(lists.count == 0 && lists.abandoned == 0)
        }
    }

    /// A list is dirty once changed, until marked written.
    @Test func aChangedListIsDirtyUntilWritten() {
        var lists = MembershipLists()
        let slot = lists.appendUnindexed(Key(pid: 1, ordinal: 7), [3])
        #expect(!lists.isDirty(slot))
        let first = lists.setDirty(slot, true), second = lists.setDirty(slot, true)
        #expect(!first && second)
        #expect(lists.isDirty(slot))
        lists.setDirty(slot, false)
        #expect(!lists.isDirty(slot))
        #expect(lists.key(at: slot).ordinal == 7)
    }

    /// A snapshot (what the inversion reads on its thread) keeps the lists
    /// as they were when it was taken, whatever changes after.
    @Test func aSnapshotKeepsItsLists() {
        var lists = MembershipLists()
        let a = lists.appendUnindexed(Key(pid: 1, ordinal: 0), [1, 3, 5, 7])
        let b = lists.appendUnindexed(Key(pid: 1, ordinal: 1), [2])
        let snapshot = lists.snapshot
        let inserted = lists.insert(4, intoListAt: a), removed = lists.remove(2, fromListAt: b)
        #expect(inserted && removed)
        for tid in 10..<40 as Range<UInt32> { _ = lists.insert(tid, intoListAt: b) }  // b moves
        snapshot.read { reader in
            #expect(reader.withList(at: a) { Array($0) } == [1, 3, 5, 7])
            #expect(reader.withList(at: b) { Array($0) } == [2])
        }
        #expect(lists.list(at: a) == [1, 3, 4, 5, 7])
        #expect(lists.list(at: b) == Array(10..<40))
    }
}
