// One stored posting chunk read in place, the checks a chunk passes before it
// is counted, and the spreading of a container into a bitset's words. Shared
// by the counts and set operations of this target; internal to CRoaringSlices.
//
// A chunk holds exactly one container, little-endian, in one of two formats:
// - compact (schema 10 on): a tag byte (1 array, 2 bitset, 3 runs), a zero
//   byte, then the container: an array's values; a bitset's cardinality - 1
//   (u16) and its 8 KiB of words; runs as (start, length - 1) pairs. Its slice
//   is the key's. Values stay at even offsets, as the array code needs.
// - portable (stores before schema 10): a roaring bitmap of one container in
//   the portable format (https://github.com/RoaringBitmap/RoaringFormatSpec),
//   16 bytes of header for an array. Its first byte is never 0 to 3.
#ifndef TOPICSTORE_STOREDCHUNK_H
#define TOPICSTORE_STOREDCHUNK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#define POPCNT_TARGET __attribute__((target("popcnt")))
#else
#define POPCNT_TARGET
#endif

enum { kBitset = 1, kArray = 2, kRun = 3 };
enum { kCookieNoRun = 12346, kCookie = 12347, kBitsetBytes = 8192, kMaxArray = 4096 };
enum { kTagArray = 1, kTagBitset = 2, kTagRuns = 3 };
/// One container, wherever its bytes are: a bitset (`bytes` holds 8 KiB of
/// little-endian words), an array (`count` u16 values) or runs (`count` pairs
/// of u16 start and length - 1).
typedef struct {
    int type;
    const unsigned char *bytes;
    int32_t count;
} slice_t;

static inline uint16_t load16(const unsigned char *p, size_t i) {
    uint16_t v;
    memcpy(&v, p + 2 * i, 2);
    return v;
}

static inline uint32_t load32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint64_t load64(const unsigned char *p, size_t word) {
    uint64_t v;
    memcpy(&v, p + 8 * word, 8);
    return v;
}

static inline int has_bit(const unsigned char *bitset, uint32_t v) {
    return (bitset[v >> 3] >> (v & 7)) & 1;
}

/// Reads the one container of a stored chunk of slice `high` into `out`; 0 on
/// success, -1 when the bytes are not one well-formed container of that slice
/// that fits `length` exactly (every read stays inside `length`).
int topicstore_parse_stored(const unsigned char *p, size_t length, uint16_t high, slice_t *out);

/// Whether every stored run of `s` (runs) ends inside the slice: one that
/// did not would make CRoaring write past a bitset later.
int topicstore_stored_runs_in_slice(const slice_t *s);

/// Whether a stored container's values and runs ascend without overlapping
/// and its runs end inside the slice (a bitset always passes).
int topicstore_stored_is_ordered(const slice_t *s);

/// Whether the bit counts may run here: the stored bytes are little-endian
/// like the CPU, and the POPCNT instruction is there (asked once).
int topicstore_can_count(void);

/// ORs the container `s` (in memory, or stored: read with loads that need no
/// alignment) into the 1,024 words of `words`.
void topicstore_or_into_words(uint64_t *words, const slice_t *s);

/// The values of the bitset `words` (8 KiB, any alignment) into `counts[0]`,
/// and how many of them the bitsets `first` and `second` (NULL: none) hold
/// into `counts[1]` and `counts[2]`: one pass, with AVX-512 where
/// `vector` is non-zero and the CPU has it (ExpressionCounts.c).
void topicstore_count_words(const unsigned char *words, const unsigned char *first, const unsigned char *second,
                            int64_t counts[3], int vector);

#endif
