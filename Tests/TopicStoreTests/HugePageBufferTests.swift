@testable import Projections
import Synchronization
import Testing

/// `HugePageBuffer`, the fixed-capacity storage of the topic directory's
/// entries: elements that own references must be released exactly once,
/// whether removed or left when the buffer goes.
@Suite struct HugePageBufferTests {
    /// Counts its instances alive.
    final class Tracked {
        static let alive = Atomic<Int>(0)
        let value: Int
        init(_ value: Int) { self.value = value; Self.alive.add(1, ordering: .relaxed) }
        deinit { Self.alive.subtract(1, ordering: .relaxed) }
    }

    struct Element {
        var tracked: Tracked
        var number: UInt64
        var list: [UInt16]
    }

    @Test func elementsAreReadChangedRemovedAndReleasedOnce() {
        let before = Tracked.alive.load(ordering: .relaxed)
        do {
            let buffer = HugePageBuffer<Element>(capacity: 1000)
            for round in 0..<3 {
                for i in 0..<1000 { buffer.append(Element(tracked: Tracked(i), number: UInt64(i * round), list: [UInt16(i), 7])) }
                #expect(buffer.count == 1000)
                #expect(Tracked.alive.load(ordering: .relaxed) == before + 1000)
                for i in stride(from: 0, to: 1000, by: 3) {
                    buffer[i].number += 1
                    buffer[i].list.append(9)
                    buffer[i] = Element(tracked: Tracked(-i), number: buffer[i].number, list: buffer[i].list)  // the old one released
                }
                #expect(Tracked.alive.load(ordering: .relaxed) == before + 1000)
                let sum = buffer.withUnsafeBufferPointer { $0.reduce(0) { $0 + Int($1.number) + $1.list.count } }
                let expected = (0..<1000).reduce(0) { $0 + $1 * round + ($1 % 3 == 0 ? 1 + 3 : 2) }
                #expect(sum == expected)
                #expect((0..<1000).allSatisfy { buffer[$0].tracked.value == ($0 % 3 == 0 ? -$0 : $0) })
                if round < 2 {
                    buffer.removeAll()
                    #expect(buffer.count == 0)
                    #expect(Tracked.alive.load(ordering: .relaxed) == before)
                }
            }
        }
        // The buffer went with 1,000 elements in it.
        #expect(Tracked.alive.load(ordering: .relaxed) == before)
    }

    @Test func aBufferOfHugePagesIsAlignedToThemAndFillsToItsCapacity() {
        let capacity = (5 << 20) / MemoryLayout<(UInt64, UInt64)>.stride
        let buffer = HugePageBuffer<(UInt64, UInt64)>(capacity: capacity)
        for i in 0..<capacity { buffer.append((UInt64(i), UInt64(i) &* 0x9E37_79B9)) }
        #expect(buffer.count == buffer.capacity)
        buffer.withUnsafeBufferPointer { elements in
            #expect(Int(bitPattern: elements.baseAddress) % (2 << 20) == 0)
            #expect(elements.indices.allSatisfy { elements[$0] == (UInt64($0), UInt64($0) &* 0x9E37_79B9) })
        }
    }
}
