extension String {
    /// Calls `body` with the string's UTF-8 bytes in place. `withUTF8` is
    /// mutating, so calling it on a parameter needs a copy (`var s = s`): a
    /// retain and a release of the string's storage at every name the fold
    /// hashes or compares, a few million times in a rebuild. A native string
    /// (every string decoded from a record or parsed from a request) is read in
    /// place; any other is copied once, as before. The copy is made in a
    /// function of its own: written here, it made every caller that reads the
    /// string from memory (an array's element) retain and release it first,
    /// whichever way the string was then read (two calls per code, 13% of a
    /// count of a list of 100 from the serving caches).
    @inlinable
    package func withUTF8Bytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        if let r = try utf8.withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) { return r }
        return try withUTF8BytesOfACopy(body)
    }

    /// `withUTF8Bytes` of a string whose bytes are not contiguous in memory: a copy's.
    @inlinable @inline(never)
    package func withUTF8BytesOfACopy<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        var s = self
        return try s.withUTF8 { try body(UnsafeRawBufferPointer($0)) }
    }
}
