/// An item ordered by three words, most significant first, and then, where
/// those are equal, by what a caller's comparison says; `payload` is the
/// caller's, not ordered by.
struct WordKeyed {
    var w0: UInt64
    var w1: UInt64
    var w2: UInt64
    var payload: UInt64

    /// Byte `d` of the 24-byte key, 0 the most significant.
    @inline(__always)
    func byte(_ d: Int) -> Int {
        let word = d < 8 ? w0 : d < 16 ? w1 : w2
        return Int(truncatingIfNeeded: word >> (56 - 8 * UInt64(d & 7))) & 0xFF
    }

    @inline(__always)
    static func wordsPrecede(_ l: WordKeyed, _ r: WordKeyed) -> Bool {
        if l.w0 != r.w0 { return l.w0 < r.w0 }
        if l.w1 != r.w1 { return l.w1 < r.w1 }
        return l.w2 < r.w2
    }

    @inline(__always)
    static func sameWords(_ l: WordKeyed, _ r: WordKeyed) -> Bool {
        l.w0 == r.w0 && l.w1 == r.w1 && l.w2 == r.w2
    }
}

extension Array where Element == WordKeyed {
    /// Sorts by the three words, then by `tieBreak` among items whose words are
    /// equal: a most-significant-byte-first radix sort, which passes over the
    /// bytes every item shares without moving anything. A rebuild sorts a
    /// million topic codes this way (their length and first 16 bytes as the
    /// words) before writing `topic_codes`; the standard library's merge sort
    /// took ~0.3 s of a core there, at a time the write-out's other threads
    /// wanted it.
    mutating func sortByWords(tieBreak: (WordKeyed, WordKeyed) -> Bool) {
        let n = count
        guard n > 1 else { return }
        // (Every item is written before it is read: the scatter fills what it copies back.)
        var scratch = [WordKeyed](unsafeUninitializedCapacity: n) { _, initialized in initialized = n }
        withoutActuallyEscaping(tieBreak) { tieBreak in
            withUnsafeMutableBufferPointer { items in
                scratch.withUnsafeMutableBufferPointer { spare in
                    withUnsafeTemporaryAllocation(of: Int.self, capacity: 24 * 2 * 257) { counts in
                        WordKeySort(items: items.baseAddress!, spare: spare.baseAddress!, counts: counts.baseAddress!,
                                    tieBreak: tieBreak).sort(0, n, digit: 0)
                    }
                }
            }
        }
    }
}

/// The recursion of `sortByWords`: `items[start..<end]` all share the key's
/// bytes before `digit`.
private struct WordKeySort {
    let items: UnsafeMutablePointer<WordKeyed>
    let spare: UnsafeMutablePointer<WordKeyed>
    /// 2 × 257 counters for each byte of the key (a call works on its own digit's).
    let counts: UnsafeMutablePointer<Int>
    let tieBreak: (WordKeyed, WordKeyed) -> Bool

    /// Ranges smaller than this are sorted by insertion.
    static let small = 24

    @inline(__always)
    func precedes(_ l: WordKeyed, _ r: WordKeyed) -> Bool {
        if !WordKeyed.sameWords(l, r) { return WordKeyed.wordsPrecede(l, r) }
        return tieBreak(l, r)
    }

    func sort(_ start: Int, _ end: Int, digit first: Int) {
        let n = end - start
        if n < Self.small { return sortByComparison(start, end) }
        // A byte every item of the range shares is passed over.
        var digit = first
        var c: UnsafeMutablePointer<Int>
        while true {
            // Equal words: the tie-break alone orders the range (usually a few items).
            if digit == 24 { return sortByComparison(start, end) }
            c = counts + 2 * 257 * digit
            c.update(repeating: 0, count: 257)
            for i in start..<end { c[items[i].byte(digit) + 1] += 1 }
            if !(1...256).contains(where: { c[$0] == n }) { break }
            digit += 1
        }
        // c[b] becomes where bucket b starts in the range; `next` where its next item goes.
        for b in 1...256 { c[b] += c[b - 1] }
        let next = c + 257
        next.update(from: c, count: 256)
        for i in start..<end {
            let b = items[i].byte(digit)
            spare[start + next[b]] = items[i]
            next[b] += 1
        }
        (items + start).update(from: spare + start, count: n)
        // (Deeper calls use the counters of deeper digits: `c` stays as it is.)
        for b in 0..<256 where c[b + 1] - c[b] > 1 {
            sort(start + c[b], start + c[b + 1], digit: digit + 1)
        }
    }

    /// Insertion for a few items, else the standard library's sort.
    private func sortByComparison(_ start: Int, _ end: Int) {
        if end - start >= Self.small {
            var range = UnsafeMutableBufferPointer(start: items + start, count: end - start)
            range.sort(by: precedes)
            return
        }
        var i = start + 1
        while i < end {
            let item = items[i]
            var j = i
            while j > start && precedes(item, items[j - 1]) {
                items[j] = items[j - 1]
                j -= 1
            }
            items[j] = item
            i += 1
        }
    }
}
