internal import CLMDB
internal import CLMDBKeys

/// Whether key `a` sorts before key `b` in the order of topicstore's tables
/// (`topicstore_key_order`, which every table searches by: LMDB's default
/// order, bytes as unsigned and a prefix before its extensions). For code
/// that reasons about where a key goes without asking LMDB, so that it holds
/// the one definition the B-trees use.
public func keySortsBefore(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
    var x = MDB_val(mv_size: a.count, mv_data: UnsafeMutableRawPointer(mutating: a.baseAddress))
    var y = MDB_val(mv_size: b.count, mv_data: UnsafeMutableRawPointer(mutating: b.baseAddress))
    return topicstore_key_order(&x, &y) < 0
}
