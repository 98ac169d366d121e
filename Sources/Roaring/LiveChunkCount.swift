/// Hands a count of our C the slice's two live chunks as it takes them (two
/// pointers and two lengths, as C arrays; nil: no chunk) and three counts to
/// fill, and returns those counts when `count` returns 0; nil otherwise, and
/// when either chunk is empty (not a chunk: decoding it says what is wrong).
/// Shared by `StoredUnionCounter` and `StoredExpressionCounter`.
func countingAgainstLiveChunks(_ first: UnsafeRawBufferPointer?, _ second: UnsafeRawBufferPointer?,
                               _ count: (UnsafePointer<UnsafeRawPointer?>, UnsafePointer<Int>, UnsafeMutablePointer<Int64>) -> Int32)
    -> (total: Int, first: Int, second: Int)? {
    if first?.count == 0 || second?.count == 0 { return nil }
    var counts: (Int64, Int64, Int64) = (0, 0, 0)
    let live: (UnsafeRawPointer?, UnsafeRawPointer?) = (first?.baseAddress, second?.baseAddress)
    let liveLengths: (Int, Int) = (first?.count ?? 0, second?.count ?? 0)
    let result = withUnsafePointer(to: live) { l in
        withUnsafePointer(to: liveLengths) { n in
            withUnsafeMutablePointer(to: &counts) { c in
                count(UnsafeRawPointer(l).assumingMemoryBound(to: UnsafeRawPointer?.self),
                      UnsafeRawPointer(n).assumingMemoryBound(to: Int.self),
                      UnsafeMutableRawPointer(c).assumingMemoryBound(to: Int64.self))
            }
        }
    }
    return result == 0 ? (Int(counts.0), Int(counts.1), Int(counts.2)) : nil
}
