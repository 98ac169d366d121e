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

extension String {
    /// `bytes` as a String, made from two words when they are at most 15
    /// ASCII bytes — a small string, which Swift keeps in the String value
    /// itself — and through `String(decoding:as:)` otherwise (which repairs
    /// invalid UTF-8). Every topic code, project name and short device_id a
    /// log record holds is such a string: through `String(decoding:as:)`
    /// each was checked for ASCII, for UTF-8 and for its length again, ~170
    /// instructions a string, 13% of a rebuild's log reader's own work
    /// (callgrind, leaving out the SHA-256 of its chain).
    ///
    /// The words are laid out as `smallUTF8Words` reads them: the bytes in
    /// order, and in the last byte the count in the low nibble with "small",
    /// "ASCII" and "immortal" in bits 5, 6 and 7 (the standard library's ABI
    /// on 64-bit little-endian platforms). `StringBytesTests` checks that
    /// every length gives the String `String(decoding:as:)` gives.
    @inlinable @inline(__always)
    package init(decodingLogText bytes: UnsafeRawBufferPointer) {
        #if _pointerBitWidth(_64) && _endian(little)
        let n = bytes.count
        if n <= 15, let base = bytes.baseAddress {
            let (low, high) = base.littleEndianWords(n)
            if (low | high) & 0x8080_8080_8080_8080 == 0 {
                // Moved out of the words' memory, owned: `unsafeBitCast` gave a borrowed
                // String, which the caller then retained (a call, on a small string a no-op).
                var words = (low, high | (0xE0 | UInt64(n)) << 56)
                self = withUnsafeMutableBytes(of: &words) { $0.baseAddress!.assumingMemoryBound(to: String.self).move() }
                return
            }
        } else if n == 0 {
            self = ""
            return
        }
        #endif
        self = String(decodingLongerLogText: bytes)
    }

    /// `String(decoding:as:)`, out of line: what `init(decodingLogText:)`
    /// does for a longer string, kept out of every decoder it is inlined in.
    @inline(never) @usableFromInline
    init(decodingLongerLogText bytes: UnsafeRawBufferPointer) {
        self = String(decoding: bytes, as: UTF8.self)
    }
}

extension UnsafeRawPointer {
    /// The `n` ≤ 16 bytes here as two little-endian words, zero beyond them:
    /// two runs of bytes of the same length are equal when their words are.
    /// Read only within the bytes (see `littleEndianTail`). What the name
    /// tables hash and compare a short name as (`NameIndex.shortWords`) and
    /// what a small String holds (`String(decodingLogText:)`).
    @inlinable @inline(__always)
    package func littleEndianWords(_ n: Int) -> (UInt64, UInt64) {
        n >= 8 ? (UInt64(littleEndian: loadUnaligned(as: UInt64.self)), (self + 8).littleEndianTail(n - 8)) : (littleEndianTail(n), 0)
    }

    /// The `n` (0-7) bytes here as a little-endian word, zero above them: two
    /// 4-byte loads that may overlap, or single bytes, all within the bytes. A
    /// short String's bytes are handed over as a copy just stored on the stack
    /// in two 8-byte words: loads inside one of those words are served from the
    /// stores, where the bytes copied again (`memcpy`) and loaded as one word
    /// waited for them to reach the cache (a quarter of looking up a list's 100
    /// codes, perf), as does a word load that spans both. (Byte by byte in a
    /// loop, with its bounds checks, this cost as much as the rest of the hash.)
    @inlinable @inline(__always)
    package func littleEndianTail(_ n: Int) -> UInt64 {
        guard n > 0 else { return 0 }
        if n >= 4 {
            let low = UInt64(UInt32(littleEndian: loadUnaligned(as: UInt32.self)))
            let high = UInt64(UInt32(littleEndian: loadUnaligned(fromByteOffset: n - 4, as: UInt32.self)))
            return low | high << (8 * (n - 4))
        }
        var t = UInt64(load(as: UInt8.self))
        if n > 1 { t |= UInt64(load(fromByteOffset: 1, as: UInt8.self)) << 8 }
        if n > 2 { t |= UInt64(load(fromByteOffset: 2, as: UInt8.self)) << 16 }
        return t
    }
}
