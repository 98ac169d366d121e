@testable import Projections
import Testing

/// A device's topic list (`DeviceTopics`): an ascending list of topic ids,
/// searched, inserted into and removed from in place by the fold.
@Suite struct DeviceTopicsTests {
    /// Every insertion and removal, at every place of lists of 0–12 ids, of
    /// arrays with spare room and without, leaves what `Array`'s own
    /// `insert(_:at:)` and `remove(at:)` leave, and the list ascending.
    @Test func insertAndRemoveInPlaceEqualArrays() {
        for length in 0...12 {
            let list = (0..<length).map { UInt32($0 * 10 + 5) }
            for reserved in [0, length + 1, 2 * length + 4] {
                // Insert a new id at each place the search gives.
                for newID in stride(from: UInt32(0), through: UInt32(length * 10 + 10), by: 10) {
                    var ours = list
                    ours.reserveCapacity(reserved)
                    let (found, at) = DeviceTopics.search(ours, newID)
                    #expect(!found)
                    var expected = list
                    expected.insert(newID, at: at)
                    DeviceTopics.insert(newID, at: at, into: &ours)
                    #expect(ours == expected, "insert \(newID) into \(list)")
                    #expect(zip(ours, ours.dropFirst()).allSatisfy { $0 < $1 })
                }
                // Remove each present id.
                for index in list.indices {
                    var ours = list
                    ours.reserveCapacity(reserved)
                    var expected = list
                    expected.remove(at: index)
                    DeviceTopics.remove(at: index, from: &ours)
                    #expect(ours == expected, "remove at \(index) of \(list)")
                }
            }
        }
    }

    /// A list shared with another value is copied before it changes: the
    /// other value keeps what it had.
    @Test func aSharedListIsNotChangedUnderItsOtherHolder() {
        var list: [UInt32] = [1, 3, 5, 7]
        let other = list
        DeviceTopics.insert(4, at: 2, into: &list)
        #expect(list == [1, 3, 4, 5, 7])
        #expect(other == [1, 3, 5, 7])
        var again = list
        let kept = again
        DeviceTopics.remove(at: 0, from: &again)
        #expect(again == [3, 4, 5, 7])
        #expect(kept == [1, 3, 4, 5, 7])
    }
}
