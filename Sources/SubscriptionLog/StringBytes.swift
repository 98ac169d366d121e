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

extension String {
    /// The UTF-8 bytes of a small string — one of at most 15 bytes, which
    /// Swift keeps in the String value itself — as two little-endian words
    /// (zero beyond its bytes), with its byte count; nil for any other string.
    ///
    /// Read from the value's two words as the standard library lays them out
    /// on 64-bit little-endian platforms (its ABI: the bytes in order, and in
    /// the last byte the count in the low nibble and "small" in bit 5). A
    /// small string's `withUTF8Bytes` stores those words on the stack and
    /// hands over a pointer to them, which a caller then loads back (a
    /// per-user topic's code, looked up once per count): here they stay in
    /// registers. `StringBytesTests` checks it against `withUTF8Bytes`.
    @inlinable @inline(__always)
    package var smallUTF8Words: (words: (UInt64, UInt64), count: Int)? {
        #if _pointerBitWidth(_64) && _endian(little)
        let (low, high) = unsafeBitCast(self, to: (UInt64, UInt64).self)
        guard high & (1 << 61) != 0 else { return nil }
        return ((low, high & 0x00FF_FFFF_FFFF_FFFF), Int(truncatingIfNeeded: high >> 56) & 0xF)
        #else
        return nil
        #endif
    }
}
