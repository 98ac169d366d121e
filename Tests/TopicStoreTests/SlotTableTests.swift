@testable import Projections
import Testing

/// `SlotTable.keepOnly(slots:)`, which the writer uses to keep its most
/// subscribed shared topics' records when it bounds its caches: what is kept
/// is found again by key, with its value, at its new slot; what is dropped is
/// not found, and a key inserted afterwards is not a second entry.
@Suite struct SlotTableTests {
    struct Key: SlotKey {
        var n: UInt64
        var hash64: UInt64 { n }
    }

    @Test func keptEntriesAreFoundAtTheirNewSlotsAndDroppedOnesAreNot() {
        var rng = SystemRandomNumberGenerator()
        for round in 0..<20 {
            var table = SlotTable<Key, String>(capacity: 16)
            let keys = (0..<Int.random(in: 1...300, using: &rng)).map { _ in UInt64.random(in: 0..<1_000, using: &rng) }
            var model: [UInt64: String] = [:]
            for k in keys where table.slot(of: Key(n: k)) == nil {
                table.insert(Key(n: k), "v\(k)")
                model[k] = "v\(k)"
            }
            let kept = table.keys.indices.filter { _ in Bool.random(using: &rng) }
            let keptKeys = Set(kept.map { table.keys[$0].n })
            table.keepOnly(slots: kept)
            #expect(table.count == keptKeys.count, "round \(round)")
            for (k, v) in model {
                let slot = table.slot(of: Key(n: k))
                if keptKeys.contains(k) {
                    let s = try! #require(slot, "round \(round): kept key \(k) not found")
                    #expect(table.keys[s].n == k && table.values[s] == v, "round \(round): key \(k)")
                } else {
                    #expect(slot == nil, "round \(round): dropped key \(k) found")
                }
            }
            // A dropped key inserted again, and a kept one looked up, make no second entry.
            for k in model.keys where !keptKeys.contains(k) { table.insert(Key(n: k), "again") }
            #expect(table.count == model.count, "round \(round)")
            for k in keptKeys { #expect(table.values[try! #require(table.slot(of: Key(n: k)))] == model[k]) }
        }
    }
}
