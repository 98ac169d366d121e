extension String {
    /// Calls `body` with the string's UTF-8 bytes in place. `withUTF8` is
    /// mutating, so calling it on a parameter needs a copy (`var s = s`): a
    /// retain and a release of the string's storage at every name the fold
    /// hashes or compares, a few million times in a rebuild. A native string
    /// (every string decoded from a record or parsed from a request) is read in
    /// place; any other is copied once, as before.
    @inlinable
    package func withUTF8Bytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        if let r = try utf8.withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) { return r }
        var s = self
        return try s.withUTF8 { try body(UnsafeRawBufferPointer($0)) }
    }
}
