// Stored posting chunks read in place from their LMDB values:
// - intersection counts between an in-memory CRoaring bitmap and one chunk. An
//   audience count asks this for every slice of the audience against the
//   live-token sets of both platforms; decoding each stored 8 KiB bitset first
//   (a malloc and a copy) and counting with libroaring (whose Debian build has
//   no POPCNT) was most of a count's time;
// - appending a chunk's container to a bitmap being built slice by slice (a
//   topic's bitmap), instead of decoding it into a bitmap of its own and
//   taking the union, which copied it again.
//
// The stored bytes follow the roaring portable format
// (https://github.com/RoaringBitmap/RoaringFormatSpec), which is little-endian;
// a chunk holds exactly one container. Everything read from them is bounds
// checked; anything unexpected returns -1 and the caller decodes the chunk the
// ordinary way, which reports the corruption with its key.
#include "CRoaringSlices.h"
#include "SortedArrays.h"
#include "StoredChunk.h"

#include <stdlib.h>
#include <string.h>
#include <roaring/array_util.h>
#include <roaring/roaring.h>
#include <roaring/containers/containers.h>

/// Above how many runs a container in memory is spread into a bitset to be
/// counted against two stored ones (see `topicstore_slice_intersection_counts`).
enum { kRunsToBitset = 64 };
/// From how many values in all the arrays of a union are ORed into words
/// rather than merged, where the count's vector pass runs (`topicstore_union_counts`).
enum { kUnionByWordsValues = 256 };

/// Set bits of `bitset` in [start, end] (inclusive).
POPCNT_TARGET static int64_t range_popcount(const unsigned char *bitset, uint32_t start, uint32_t end) {
    uint32_t first = start >> 6, last = end >> 6;
    uint64_t low = ~UINT64_C(0) << (start & 63);
    uint64_t high = ~UINT64_C(0) >> (63 - (end & 63));
    if (first == last) return __builtin_popcountll(load64(bitset, first) & low & high);
    int64_t n = __builtin_popcountll(load64(bitset, first) & low);
    for (uint32_t w = first + 1; w < last; w++) n += __builtin_popcountll(load64(bitset, w));
    return n + __builtin_popcountll(load64(bitset, last) & high);
}

POPCNT_TARGET static int64_t and_popcount(const unsigned char *a, const unsigned char *b) {
    int64_t n = 0;
    for (size_t w = 0; w < kBitsetBytes / 8; w += 4) {
        n += __builtin_popcountll(load64(a, w) & load64(b, w));
        n += __builtin_popcountll(load64(a, w + 1) & load64(b, w + 1));
        n += __builtin_popcountll(load64(a, w + 2) & load64(b, w + 2));
        n += __builtin_popcountll(load64(a, w + 3) & load64(b, w + 3));
    }
    return n;
}

/// Container `i` of `ra` as a slice (a shared one resolved to what it
/// shares); 1, or -1 for a type this code does not know. A bitset's `count`
/// is its cardinality field, which CRoaring keeps exact outside its lazy operations.
static int container_slice(const roaring_array_t *ra, int32_t i, slice_t *out) {
    const void *container = ra->containers[i];
    uint8_t type = ra->typecodes[i];
    if (type == SHARED_CONTAINER_TYPE_CODE) {
        const shared_container_t *shared = container;
        container = shared->container;
        type = shared->typecode;
    }
    switch (type) {
    case BITSET_CONTAINER_TYPE_CODE:
        out->type = kBitset;
        out->bytes = (const unsigned char *)((const bitset_container_t *)container)->array;
        out->count = ((const bitset_container_t *)container)->cardinality;
        return 1;
    case ARRAY_CONTAINER_TYPE_CODE:
        out->type = kArray;
        out->bytes = (const unsigned char *)((const array_container_t *)container)->array;
        out->count = ((const array_container_t *)container)->cardinality;
        return 1;
    case RUN_CONTAINER_TYPE_CODE:
        out->type = kRun;
        out->bytes = (const unsigned char *)((const run_container_t *)container)->runs;
        out->count = ((const run_container_t *)container)->n_runs;
        return 1;
    default:
        return -1;
    }
}

/// The container of `bitmap` for slice `high`, or 0 when it has none there.
static int memory_slice(const roaring_bitmap_t *bitmap, uint16_t high, slice_t *out) {
    const roaring_array_t *ra = &bitmap->high_low_container;
    int32_t lo = 0, hi = ra->size - 1;
    while (lo <= hi) {
        int32_t mid = (lo + hi) >> 1;
        uint16_t key = ra->keys[mid];
        if (key < high) lo = mid + 1;
        else if (key > high) hi = mid - 1;
        else return container_slice(ra, mid, out);
    }
    return 0;
}

POPCNT_TARGET static int64_t count_with_bitset(const unsigned char *bitset, const slice_t *other) {
    int64_t n = 0;
    switch (other->type) {
    case kBitset:
        return and_popcount(bitset, other->bytes);
    case kArray:
        for (int32_t i = 0; i < other->count; i++) n += has_bit(bitset, load16(other->bytes, i));
        return n;
    default:
        for (int32_t i = 0; i < other->count; i++) {
            uint32_t start = load16(other->bytes, 2 * i);
            n += range_popcount(bitset, start, start + load16(other->bytes, 2 * i + 1));
        }
        return n;
    }
}

static int64_t count_array_array(const slice_t *a, const slice_t *b) {
    int64_t n = 0;
    int32_t i = 0, j = 0;
    while (i < a->count && j < b->count) {
        uint16_t x = load16(a->bytes, i), y = load16(b->bytes, j);
        if (x < y) i++;
        else if (x > y) j++;
        else { n++; i++; j++; }
    }
    return n;
}

static int64_t count_array_run(const slice_t *a, const slice_t *r) {
    int64_t n = 0;
    int32_t i = 0, j = 0;
    while (i < a->count && j < r->count) {
        uint32_t v = load16(a->bytes, i);
        uint32_t start = load16(r->bytes, 2 * j), end = start + load16(r->bytes, 2 * j + 1);
        if (v < start) i++;
        else if (v > end) j++;
        else { n++; i++; }
    }
    return n;
}

static int64_t count_run_run(const slice_t *a, const slice_t *b) {
    int64_t n = 0;
    int32_t i = 0, j = 0;
    while (i < a->count && j < b->count) {
        uint32_t s1 = load16(a->bytes, 2 * i), e1 = s1 + load16(a->bytes, 2 * i + 1);
        uint32_t s2 = load16(b->bytes, 2 * j), e2 = s2 + load16(b->bytes, 2 * j + 1);
        uint32_t s = s1 > s2 ? s1 : s2, e = e1 < e2 ? e1 : e2;
        if (s <= e) n += e - s + 1;
        if (e1 < e2) i++; else j++;
    }
    return n;
}

/// The values two containers share (`m` in memory, `s` stored, or either way round).
static int64_t count_slices(const slice_t *m, const slice_t *s) {
    if (m->type == kBitset) return count_with_bitset(m->bytes, s);
    if (s->type == kBitset) return count_with_bitset(s->bytes, m);
    if (m->type == kArray && s->type == kArray) return count_array_array(m, s);
    if (m->type == kArray) return count_array_run(m, s);
    if (s->type == kArray) return count_array_run(s, m);
    return count_run_run(m, s);
}

POPCNT_TARGET static int64_t bitset_popcount(const unsigned char *bitset) {
    int64_t n = 0;
    for (size_t w = 0; w < kBitsetBytes / 8; w++) n += __builtin_popcountll(load64(bitset, w));
    return n;
}

/// Copies a stored bitset's 1,024 words to `words` and counts them in the
/// same pass (one read of the stored bytes, where a count and a copy read them twice).
POPCNT_TARGET static int64_t copy_counting(uint64_t *words, const unsigned char *bitset) {
    int64_t n = 0;
    for (size_t w = 0; w < kBitsetBytes / 8; w++) {
        uint64_t v = load64(bitset, w);
        words[w] = v;
        n += __builtin_popcountll(v);
    }
    return n;
}

/// ANDs the stored bitset `stored` into `words` in place; the values left.
POPCNT_TARGET static int64_t and_in_place_counting(uint64_t *words, const unsigned char *stored) {
    int64_t n = 0;
    for (size_t w = 0; w < kBitsetBytes / 8; w++) {
        words[w] &= load64(stored, w);
        n += __builtin_popcountll(words[w]);
    }
    return n;
}

/// Whether value `v` is in the stored bitset `stored`.
static inline int stored_bit(const unsigned char *stored, uint16_t v) { return (load64(stored, v >> 6) >> (v & 63)) & 1; }

int topicstore_slice_intersect_stored(void *bitmap, uint16_t high, const void *stored, size_t length) {
    if (!topicstore_can_count() || stored == NULL) return -1;
    roaring_array_t *ra = &((roaring_bitmap_t *)bitmap)->high_low_container;
    int32_t i = ra_get_index(ra, high);
    if (i < 0) return 0;  // nothing of the bitmap there
    slice_t s;
    if (topicstore_parse_stored(stored, length, high, &s) != 0 || !topicstore_stored_is_ordered(&s)) return -1;
    uint8_t type = ra->typecodes[i];
    if (s.type == kRun || (type != BITSET_CONTAINER_TYPE_CODE && type != ARRAY_CONTAINER_TYPE_CODE)) return -2;
    if (s.type == kArray) {
        // The stored values the bitmap's slice holds: at most as many as are stored.
        if (type == BITSET_CONTAINER_TYPE_CODE) {
            const bitset_container_t *b = (const bitset_container_t *)ra->containers[i];
            array_container_t *a = array_container_create_given_capacity(s.count);
            if (a == NULL) return -3;
            for (int32_t k = 0; k < s.count; k++) {
                uint16_t v = load16(s.bytes, k);
                a->array[a->cardinality] = v;
                a->cardinality += (int32_t)((b->array[v >> 6] >> (v & 63)) & 1);
            }
            bitset_container_free((bitset_container_t *)ra->containers[i]);
            ra->containers[i] = a;
            ra->typecodes[i] = ARRAY_CONTAINER_TYPE_CODE;
            if (a->cardinality == 0) ra_remove_at_index_and_free(ra, i);
            return 0;
        }
        // Two ascending lists, merged into the bitmap's own array: with no branch
        // per value when they are within 4x of each other's size (as the union's
        // merge in SortedArrays.c, whose reasons apply); otherwise value by value,
        // skipping ahead in the stored list, which a skewed pair predicts well.
        array_container_t *a = (array_container_t *)ra->containers[i];
        int32_t kept = 0, k = 0;
        if (4 * (int64_t)a->cardinality >= s.count && 4 * (int64_t)s.count >= a->cardinality) {
            int32_t j = 0;
            while (j < a->cardinality && k < s.count) {
                uint16_t v = a->array[j], w = load16(s.bytes, k);
                a->array[kept] = v;  // kept <= j: nothing unread is overwritten
                kept += v == w;
                j += v <= w;
                k += w <= v;
            }
        } else {
            for (int32_t j = 0; j < a->cardinality && k < s.count; j++) {
                uint16_t v = a->array[j];
                while (k < s.count && load16(s.bytes, k) < v) k++;
                if (k < s.count && load16(s.bytes, k) == v) a->array[kept++] = v;
            }
        }
        if (kept == 0) ra_remove_at_index_and_free(ra, i);
        else a->cardinality = kept;
        return 0;
    }
    if (bitset_popcount(s.bytes) != s.count) return -1;  // damaged: the caller's decoding reports it
    if (type == BITSET_CONTAINER_TYPE_CODE) {
        bitset_container_t *b = (bitset_container_t *)ra->containers[i];
        int64_t n = and_in_place_counting(b->array, s.bytes);
        b->cardinality = (int32_t)n;
        if (n == 0) {
            ra_remove_at_index_and_free(ra, i);
        } else if (n <= kMaxArray) {
            // As CRoaring keeps it: at most 4,096 values are an array.
            array_container_t *a = array_container_from_bitset(b);
            if (a == NULL) return -3;  // the bitset holds the intersection, counted
            bitset_container_free(b);
            ra->containers[i] = a;
            ra->typecodes[i] = ARRAY_CONTAINER_TYPE_CODE;
        }
        return 0;
    }
    array_container_t *a = (array_container_t *)ra->containers[i];
    int32_t kept = 0;
    for (int32_t k = 0; k < a->cardinality; k++) {
        uint16_t v = a->array[k];
        a->array[kept] = v;
        kept += stored_bit(s.bytes, v);
    }
    if (kept == 0) ra_remove_at_index_and_free(ra, i);
    else a->cardinality = kept;
    return 0;
}

int topicstore_remove_slice(void *bitmap, uint16_t high) {
    roaring_array_t *ra = &((roaring_bitmap_t *)bitmap)->high_low_container;
    int32_t i = ra_get_index(ra, high);
    if (i >= 0) ra_remove_at_index_and_free(ra, i);
    return i >= 0;
}

/// How many values container `s` holds (a bitset's counted, not its header's word taken).
POPCNT_TARGET static int64_t slice_cardinality(const slice_t *s) {
    switch (s->type) {
    case kArray: return s->count;
    case kBitset: return bitset_popcount(s->bytes);
    default: {
        int64_t n = 0;
        for (int32_t i = 0; i < s->count; i++) n += (int64_t)load16(s->bytes, 2 * i + 1) + 1;
        return n;
    }
    }
}

int64_t topicstore_slice_cardinality(uint16_t high, const void *stored, size_t length) {
    if (!topicstore_can_count() || stored == NULL) return -1;
    slice_t s;
    if (topicstore_parse_stored(stored, length, high, &s) != 0 || !topicstore_stored_is_ordered(&s)) return -1;
    return slice_cardinality(&s);
}

int64_t topicstore_slice_intersection_count(const void *bitmap, uint16_t high, const void *stored, size_t length) {
    if (!topicstore_can_count() || stored == NULL) return -1;
    slice_t s, m;
    if (topicstore_parse_stored(stored, length, high, &s) != 0 || !topicstore_stored_is_ordered(&s)) return -1;
    int found = memory_slice(bitmap, high, &m);
    if (found < 0) return -1;
    if (found == 0) return 0;
    return count_slices(&m, &s);
}

static void count_against_two(const slice_t *m, const slice_t s[2], const int present[2], uint64_t *words, int64_t counts[2]);

int topicstore_slice_intersection_counts(const void *bitmap, uint16_t high, const void *const stored[2],
                                         const size_t lengths[2], int64_t counts[2]) {
    if (!topicstore_can_count()) return -1;
    slice_t s[2], m;
    int present[2];
    for (int i = 0; i < 2; i++) {
        present[i] = stored[i] != NULL;
        if (present[i] && (topicstore_parse_stored(stored[i], lengths[i], high, &s[i]) != 0 || !topicstore_stored_is_ordered(&s[i]))) return -1;
    }
    counts[0] = counts[1] = 0;
    int found = memory_slice(bitmap, high, &m);
    if (found < 0) return -1;
    if (found == 0) return 0;
    uint64_t words[kBitsetBytes / 8] __attribute__((aligned(64)));
    count_against_two(&m, s, present, words, counts);
    return 0;
}

/// The values `m` shares with `s[0]` and with `s[1]` (where `present`), into
/// `counts[0]` and `counts[1]` (left as they are where not present); `words`
/// is 8 KiB of scratch, unless `m` is itself those words.
static void count_against_two(const slice_t *m, const slice_t s[2], const int present[2], uint64_t *words, int64_t counts[2]) {
    if (m->type == kRun && m->count > kRunsToBitset) {
        // Counting each of many runs against a stored bitset (the live sets against
        // `all`) costs a masked popcount per run, twice: spread them once instead.
        memset(words, 0, kBitsetBytes);
        topicstore_or_into_words(words, m);
        for (int i = 0; i < 2; i++) if (present[i]) counts[i] = count_with_bitset((const unsigned char *)words, &s[i]);
        return;
    }
    if (m->type == kArray && present[0] && present[1] && s[0].type == kBitset && s[1].type == kBitset) {
        // The usual case (an audience's array against both platforms' live
        // bitsets): one pass over the values for both counts, not one each.
        int64_t n0 = 0, n1 = 0;
        for (int32_t i = 0; i < m->count; i++) {
            uint16_t v = load16(m->bytes, i);
            n0 += has_bit(s[0].bytes, v);
            n1 += has_bit(s[1].bytes, v);
        }
        counts[0] = n0;
        counts[1] = n1;
        return;
    }
    for (int i = 0; i < 2; i++) if (present[i]) counts[i] = count_slices(m, &s[i]);
}

/// Puts a bitset of the `card` values of `run` in place of container `i`
/// (which is `run`) and frees `run`; -1 when the allocation failed (nothing changed).
static int replace_with_bitset(roaring_array_t *ra, int32_t i, run_container_t *run, uint32_t card) {
    bitset_container_t *b = bitset_container_create();
    if (b == NULL) return -1;
    for (int32_t r = 0; r < run->n_runs; r++) bitset_set_lenrange(b->array, run->runs[r].value, run->runs[r].length);
    b->cardinality = (int32_t)card;
    ra->containers[i] = b;
    ra->typecodes[i] = BITSET_CONTAINER_TYPE_CODE;
    run_container_free(run);
    return 0;
}

int topicstore_remove_run_compression(void *bitmap) {
    roaring_array_t *ra = &((roaring_bitmap_t *)bitmap)->high_low_container;
    for (int32_t i = 0; i < ra->size; i++) {
        if (ra->typecodes[i] != RUN_CONTAINER_TYPE_CODE) continue;  // (no shared containers: copy-on-write is off)
        run_container_t *run = (run_container_t *)ra->containers[i];
        uint32_t card = 0;
        for (int32_t r = 0; r < run->n_runs; r++) card += (uint32_t)run->runs[r].length + 1;
        if (card <= kMaxArray) {
            array_container_t *a = array_container_create_given_capacity((int32_t)card);
            if (a == NULL) return -1;
            for (int32_t r = 0; r < run->n_runs; r++) {
                uint32_t start = run->runs[r].value, end = start + run->runs[r].length;  // 32 bits: end may be 65535
                for (uint32_t v = start; v <= end; v++) a->array[a->cardinality++] = (uint16_t)v;
            }
            ra->containers[i] = a;
            ra->typecodes[i] = ARRAY_CONTAINER_TYPE_CODE;
            run_container_free(run);
        } else if (replace_with_bitset(ra, i, run, card) != 0) {
            return -1;
        }
    }
    return 0;
}

int topicstore_bitsets_for_many_runs(void *bitmap, int32_t most_runs) {
    roaring_array_t *ra = &((roaring_bitmap_t *)bitmap)->high_low_container;
    for (int32_t i = 0; i < ra->size; i++) {
        if (ra->typecodes[i] != RUN_CONTAINER_TYPE_CODE) continue;  // (no shared containers: copy-on-write is off)
        run_container_t *run = (run_container_t *)ra->containers[i];
        if (run->n_runs <= most_runs) continue;
        uint32_t card = 0;
        for (int32_t r = 0; r < run->n_runs; r++) card += (uint32_t)run->runs[r].length + 1;
        if (card > kMaxArray && replace_with_bitset(ra, i, run, card) != 0) return -1;
    }
    return 0;
}

/// Runs (maximal stretches of consecutive values) of the sorted, distinct
/// `values`, counted until they reach `stop`.
static int32_t array_runs(const uint16_t *values, int32_t n, int32_t stop) {
    if (n == 0) return 0;
    int32_t runs = 1;
    for (int32_t i = 1; i < n && runs < stop; i++) runs += values[i] != (uint16_t)(values[i - 1] + 1);
    return runs;
}

/// Runs of a bitset's 1,024 words, counted until they reach `stop` (checked
/// every 16 words, so the count may pass it): a run starts at a set bit whose
/// next lower bit is clear.
static inline __attribute__((always_inline)) int32_t bitset_runs_counted(const uint64_t *words, int32_t stop) {
    int32_t runs = 0;
    uint64_t below = 0;  // the previous word's last bit
    for (int32_t w = 0; w < kBitsetBytes / 8; w++) {
        runs += __builtin_popcountll(words[w] & ~(words[w] << 1 | below));
        below = words[w] >> 63;
        if ((w & 15) == 15 && runs >= stop) break;
    }
    return runs;
}

/// `bitset_runs_counted` with the POPCNT instruction.
POPCNT_TARGET static int32_t bitset_runs_popcnt(const uint64_t *words, int32_t stop) {
    return bitset_runs_counted(words, stop);
}

static int32_t bitset_runs(const uint64_t *words, int32_t stop) {
    return topicstore_can_count() ? bitset_runs_popcnt(words, stop) : bitset_runs_counted(words, stop);
}

int topicstore_has_canonical_encoding(const void *bitmap, int32_t most_runs) {
    const roaring_array_t *ra = &((const roaring_bitmap_t *)bitmap)->high_low_container;
    // Above 4,096 values: runs when they take fewer bytes than a bitset (2 + 4r < 8,192)
    // and are at most `most_runs`.
    const int32_t most_kept_runs = most_runs < 2047 ? most_runs : 2047;
    for (int32_t i = 0; i < ra->size; i++) {
        switch (ra->typecodes[i]) {
        case ARRAY_CONTAINER_TYPE_CODE: {
            // An array of n values stays one when its runs are at least n / 2 (2 + 4r >= 2 + 2n).
            const array_container_t *a = (const array_container_t *)ra->containers[i];
            const int32_t n = a->cardinality;
            if (n == 0 || n > kMaxArray) return 0;
            if (2 * array_runs(a->array, n, (n + 1) / 2) < n) return 0;
            break;
        }
        case BITSET_CONTAINER_TYPE_CODE: {
            const bitset_container_t *b = (const bitset_container_t *)ra->containers[i];
            // An unknown cardinality: leave it to `optimize`.
            if (b->cardinality <= kMaxArray) return 0;
            if (bitset_runs(b->array, most_kept_runs + 1) <= most_kept_runs) return 0;
            break;
        }
        case RUN_CONTAINER_TYPE_CODE: {
            const run_container_t *run = (const run_container_t *)ra->containers[i];
            const int32_t r = run->n_runs;
            if (r == 0) return 0;
            uint32_t n = (uint32_t)run->runs[0].length + 1;
            for (int32_t k = 1; k < r; k++) {
                // Runs that touch or overlap are not the set's runs: `optimize` merges them.
                if ((uint32_t)run->runs[k].value <= (uint32_t)run->runs[k - 1].value + run->runs[k - 1].length + 1) return 0;
                n += (uint32_t)run->runs[k].length + 1;
            }
            if (n <= kMaxArray ? 2 * r >= (int32_t)n : r > most_kept_runs) return 0;
            break;
        }
        default:
            return 0;  // shared (copy-on-write is off, so never) or unknown
        }
    }
    return 1;
}

int32_t topicstore_slice_keys(const void *bitmap, uint16_t *keys, int32_t capacity) {
    const roaring_array_t *ra = &((const roaring_bitmap_t *)bitmap)->high_low_container;
    int32_t n = ra->size < capacity ? ra->size : capacity;
    if (n > 0) memcpy(keys, ra->keys, (size_t)n * 2);
    return ra->size;
}

int topicstore_slice_append(void *bitmap, uint16_t high, const void *stored, size_t length) {
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    return -1;
#endif
    slice_t s;
    // Run order is not checked here: CRoaring's own reader does not either, it
    // is most of the cost for a run-heavy topic such as `all`, and the audit
    // compares every stored chunk with a rebuild. Runs past the slice are refused.
    if (stored == NULL || topicstore_parse_stored(stored, length, high, &s) != 0) return -1;
    if (s.type == kRun && !topicstore_stored_runs_in_slice(&s)) return -1;
    // A bitset's cardinality is taken from its header, as CRoaring's reader takes it, so a
    // damaged header would make every count of the bitmap wrong: it must match the bits
    // (counted as they are copied, below).
    if (s.type == kBitset && !topicstore_can_count()) return -1;
    roaring_array_t *ra = &((roaring_bitmap_t *)bitmap)->high_low_container;
    if (ra->size > 0 && ra->keys[ra->size - 1] >= high) return -1;
    void *container;
    uint8_t type;
    switch (s.type) {
    case kArray: {
        array_container_t *a = array_container_create_given_capacity(s.count);
        if (a == NULL) return -1;
        memcpy(a->array, s.bytes, 2 * (size_t)s.count);
        a->cardinality = s.count;
        container = a;
        type = ARRAY_CONTAINER_TYPE_CODE;
        break;
    }
    case kBitset: {
        bitset_container_t *b = bitset_container_create();
        if (b == NULL) return -1;
        if (copy_counting(b->array, s.bytes) != s.count) {
            bitset_container_free(b);
            return -1;
        }
        b->cardinality = s.count;  // the header's, checked against the bits
        container = b;
        type = BITSET_CONTAINER_TYPE_CODE;
        break;
    }
    default: {
        run_container_t *r = run_container_create_given_capacity(s.count);
        if (r == NULL) return -1;
        memcpy(r->runs, s.bytes, 4 * (size_t)s.count);
        r->n_runs = s.count;
        container = r;
        type = RUN_CONTAINER_TYPE_CODE;
        break;
    }
    }
    ra_append(ra, high, container, type);
    return 0;
}

int topicstore_slice_append_sorted(void *bitmap, uint16_t high, const uint16_t *values, size_t count) {
    if (count == 0 || count > 65536 || values == NULL) return -1;
    for (size_t i = 1; i < count; i++) {
        if (values[i - 1] >= values[i]) return -1;
    }
    roaring_array_t *ra = &((roaring_bitmap_t *)bitmap)->high_low_container;
    if (ra->size > 0 && ra->keys[ra->size - 1] >= high) return -1;
    void *container;
    uint8_t type;
    if (count <= DEFAULT_MAX_SIZE) {
        array_container_t *a = array_container_create_given_capacity((int32_t)count);
        if (a == NULL) return -1;
        memcpy(a->array, values, 2 * count);
        a->cardinality = (int32_t)count;
        container = a;
        type = ARRAY_CONTAINER_TYPE_CODE;
    } else {
        bitset_container_t *b = bitset_container_create();
        if (b == NULL) return -1;
        for (size_t i = 0; i < count; i++) b->array[values[i] >> 6] |= UINT64_C(1) << (values[i] & 63);
        b->cardinality = (int32_t)count;
        container = b;
        type = BITSET_CONTAINER_TYPE_CODE;
    }
    ra_append(ra, high, container, type);
    return 0;
}

int64_t topicstore_slice_values(uint16_t high, const void *stored, size_t length, uint32_t *out, size_t capacity) {
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    return -1;
#endif
    slice_t s;
    if (stored == NULL || topicstore_parse_stored(stored, length, high, &s) != 0 || !topicstore_stored_is_ordered(&s)) return -1;
    const uint32_t base = (uint32_t)high << 16;
    switch (s.type) {
    case kArray:
        if ((size_t)s.count > capacity) return -2;
        for (int32_t i = 0; i < s.count; i++) out[i] = base | load16(s.bytes, i);
        return s.count;
    case kBitset:
        return -2;  // more than an array holds (4,096), which is more than any caller gathers
    default: {
        size_t n = 0;
        for (int32_t i = 0; i < s.count; i++) n += (size_t)load16(s.bytes, 2 * i + 1) + 1;
        if (n > capacity) return -2;
        n = 0;
        for (int32_t i = 0; i < s.count; i++) {
            uint32_t start = load16(s.bytes, 2 * i), end = start + load16(s.bytes, 2 * i + 1);  // inside the slice: checked
            for (uint32_t v = start; v <= end; v++) out[n++] = base | v;
        }
        return (int64_t)n;
    }
    }
}

// MARK: Many-way union

/// The `cardinality` (> 0) values of `words` as a new container: a bitset,
/// or at 4,096 values or fewer an array, as CRoaring keeps them; NULL when an
/// allocation failed.
static void *words_container(const uint64_t *words, int32_t cardinality, uint8_t *type) {
    if (cardinality <= kMaxArray) {
        array_container_t *a = array_container_create_given_capacity(cardinality);
        if (a == NULL) return NULL;
        int32_t k = 0;
        for (int32_t w = 0; w < kBitsetBytes / 8; w++) {
            for (uint64_t bits = words[w]; bits != 0; bits &= bits - 1)
                a->array[k++] = (uint16_t)(64 * w + __builtin_ctzll(bits));
        }
        a->cardinality = cardinality;
        *type = ARRAY_CONTAINER_TYPE_CODE;
        return a;
    }
    bitset_container_t *b = bitset_container_create();
    if (b == NULL) return NULL;
    memcpy(b->array, words, kBitsetBytes);
    b->cardinality = cardinality;
    *type = BITSET_CONTAINER_TYPE_CODE;
    return b;
}

/// The union of the `n` containers of one slice, as a new container (its
/// type in `*type`); NULL when an allocation failed. Arrays that fit one
/// array together are merged two at a time, smallest first
/// (`topicstore_sorted_union`); anything else is ORed into `words` (8 KiB of
/// scratch), counted, and kept as a bitset or, when it holds at most 4,096
/// values, an array. `merged` has room for two arrays and the merge's slack.
static void *union_of_slices(slice_t *slices, int32_t n, uint64_t *words, uint16_t *merged, uint8_t *type) {
    int all_arrays = 1;
    int32_t values = 0;
    for (int32_t i = 0; i < n; i++) {
        if (slices[i].type != kArray) { all_arrays = 0; break; }
        values += slices[i].count;
    }
    if (all_arrays && values <= kMaxArray) {
        // Smallest first: the result so far stays small, and a small set merged
        // into a large one is a binary search per small value, not a walk.
        for (int32_t i = 1; i < n; i++) {
            slice_t s = slices[i];
            int32_t j = i;
            for (; j > 0 && slices[j - 1].count > s.count; j--) slices[j] = slices[j - 1];
            slices[j] = s;
        }
        // Two halves of `merged` take turns as the result so far.
        uint16_t *result = merged, *spare = merged + kMaxArray + kSortedUnionSlack;
        int32_t count = slices[0].count;
        memcpy(result, slices[0].bytes, 2 * (size_t)count);
        for (int32_t i = 1; i < n; i++) {
            count = (int32_t)topicstore_sorted_union(result, (size_t)count, (const uint16_t *)slices[i].bytes,
                                                     (size_t)slices[i].count, spare);
            uint16_t *t = result; result = spare; spare = t;
        }
        array_container_t *a = array_container_create_given_capacity(count);
        if (a == NULL) return NULL;
        memcpy(a->array, result, 2 * (size_t)count);
        a->cardinality = count;
        *type = ARRAY_CONTAINER_TYPE_CODE;
        return a;
    }
    memset(words, 0, kBitsetBytes);
    for (int32_t i = 0; i < n; i++) topicstore_or_into_words(words, &slices[i]);
    return words_container(words, (int32_t)bitset_popcount((const unsigned char *)words), type);
}

void *topicstore_union_many(const void *const *bitmaps, size_t count) {
    if (!topicstore_can_count() || count == 0 || count > (size_t)INT32_MAX) return NULL;
    roaring_bitmap_t *answer = roaring_bitmap_create();
    int32_t *at = calloc(count, sizeof(int32_t));                 // each bitmap's next container
    slice_t *slices = malloc(count * sizeof(slice_t));            // the containers of the slice at hand
    uint64_t *words = aligned_alloc(64, kBitsetBytes);
    uint16_t *merged = malloc(2 * sizeof(uint16_t) * (kMaxArray + kSortedUnionSlack));
    int failed = answer == NULL || at == NULL || slices == NULL || words == NULL || merged == NULL;
    while (!failed) {
        // The lowest slice any bitmap has left.
        int found = 0;
        uint16_t key = 0;
        for (size_t i = 0; i < count; i++) {
            const roaring_array_t *ra = &((const roaring_bitmap_t *)bitmaps[i])->high_low_container;
            if (at[i] < ra->size && (!found || ra->keys[at[i]] < key)) { key = ra->keys[at[i]]; found = 1; }
        }
        if (!found) break;
        // Its containers; `first` is the one of the first bitmap that has it.
        int32_t n = 0;
        const roaring_array_t *first = NULL;
        int32_t first_at = 0;
        for (size_t i = 0; i < count && !failed; i++) {
            const roaring_array_t *ra = &((const roaring_bitmap_t *)bitmaps[i])->high_low_container;
            if (at[i] < ra->size && ra->keys[at[i]] == key) {
                if (first == NULL) { first = ra; first_at = at[i]; }
                if (container_slice(ra, at[i], &slices[n]) != 1) failed = 1;
                n++;
                at[i]++;
            }
        }
        if (failed) break;
        void *container;
        uint8_t type;
        if (n == 1) {
            // One bitmap has this slice: a copy of its container, as it is.
            const void *c = first->containers[first_at];
            type = first->typecodes[first_at];
            if (type == SHARED_CONTAINER_TYPE_CODE) {
                type = ((const shared_container_t *)c)->typecode;
                c = ((const shared_container_t *)c)->container;
            }
            container = container_clone(c, type);
        } else {
            container = union_of_slices(slices, n, words, merged, &type);
        }
        if (container == NULL) failed = 1;
        if (failed) break;
        ra_append(&answer->high_low_container, key, container, type);
    }
    free(at);
    free(slices);
    free(words);
    free(merged);
    if (failed) {
        if (answer != NULL) roaring_bitmap_free(answer);
        return NULL;
    }
    return answer;
}

// MARK: Intersection and difference

/// `x AND y` (`subtract` 0) or `x AND NOT y` (`subtract` 1) of two CRoaring
/// bitmaps as a new one, NULL when an allocation failed or the CPU lacks
/// POPCNT. Two bitsets are combined word by word into scratch and counted
/// with POPCNT; every other pair of containers goes to CRoaring's own
/// container functions, which are already cheap for them.
static void *combine(const void *x, const void *y, int subtract) {
    if (!topicstore_can_count()) return NULL;
    const roaring_array_t *ra = &((const roaring_bitmap_t *)x)->high_low_container;
    const roaring_array_t *rb = &((const roaring_bitmap_t *)y)->high_low_container;
    roaring_bitmap_t *answer = roaring_bitmap_create();
    uint64_t *words = aligned_alloc(64, kBitsetBytes);
    int failed = answer == NULL || words == NULL;
    int32_t j = 0;
    for (int32_t i = 0; i < ra->size && !failed; i++) {
        uint16_t key = ra->keys[i];
        while (j < rb->size && rb->keys[j] < key) j++;
        uint8_t ta = ra->typecodes[i];
        const void *ca = container_unwrap_shared(ra->containers[i], &ta);
        void *c = NULL;
        uint8_t t = 0;
        if (j >= rb->size || rb->keys[j] != key) {
            if (!subtract) continue;                 // nothing of y here: nothing in common
            c = container_clone(ca, ta);             // nothing to take away
            t = ta;
            if (c == NULL) failed = 1;
        } else {
            uint8_t tb = rb->typecodes[j];
            const void *cb = container_unwrap_shared(rb->containers[j], &tb);
            if (ta == BITSET_CONTAINER_TYPE_CODE && tb == BITSET_CONTAINER_TYPE_CODE) {
                const uint64_t *wa = ((const bitset_container_t *)ca)->array, *wb = ((const bitset_container_t *)cb)->array;
                if (subtract) for (size_t w = 0; w < kBitsetBytes / 8; w++) words[w] = wa[w] & ~wb[w];
                else for (size_t w = 0; w < kBitsetBytes / 8; w++) words[w] = wa[w] & wb[w];
                int32_t cardinality = (int32_t)bitset_popcount((const unsigned char *)words);
                if (cardinality == 0) continue;
                c = words_container(words, cardinality, &t);
                if (c == NULL) failed = 1;
            } else {
                c = subtract ? container_andnot(ca, ta, cb, tb, &t) : container_and(ca, ta, cb, tb, &t);
                if (c == NULL) failed = 1;
                else if (!container_nonzero_cardinality(c, t)) { container_free(c, t); continue; }
            }
        }
        if (!failed) ra_append(&answer->high_low_container, key, c, t);
    }
    free(words);
    if (failed) {
        if (answer != NULL) roaring_bitmap_free(answer);
        return NULL;
    }
    return answer;
}

void *topicstore_intersection(const void *x, const void *y) { return combine(x, y, 0); }

void *topicstore_difference(const void *x, const void *y) { return combine(x, y, 1); }

// MARK: Counts of a union of stored chunks

/// Reads the stored chunks `stored[0..<n]` and, where present, `live[0..<2]`
/// of slice `high` into `parts` and `lives`; 0, or -1 when one is not
/// well-formed, or an array lies at an odd address (LMDB keeps values 2-byte
/// aligned; the merge reads them as 16-bit values).
static int parse_union_parts(uint16_t high, const void *const *stored, const size_t *lengths, size_t n,
                             const void *const live[2], const size_t live_lengths[2],
                             slice_t *parts, slice_t lives[2], int present[2]) {
    for (size_t i = 0; i < n; i++) {
        if (stored[i] == NULL || topicstore_parse_stored(stored[i], lengths[i], high, &parts[i]) != 0 || !topicstore_stored_is_ordered(&parts[i])) return -1;
        if (parts[i].type == kArray && ((uintptr_t)parts[i].bytes & 1) != 0) return -1;
    }
    for (int i = 0; i < 2; i++) {
        present[i] = live[i] != NULL;
        if (present[i] && (topicstore_parse_stored(live[i], live_lengths[i], high, &lives[i]) != 0 || !topicstore_stored_is_ordered(&lives[i]))) return -1;
    }
    return 0;
}

int topicstore_union_counts(uint16_t high, const void *const *stored, const size_t *lengths, size_t n,
                            const void *const live[2], const size_t live_lengths[2], void *scratch, int64_t counts[3],
                            int vector) {
    if (!topicstore_can_count() || n == 0 || n > kMostUnionCounted) return -1;
    slice_t parts[kMostUnionCounted], lives[2];
    int present[2];
    if (parse_union_parts(high, stored, lengths, n, live, live_lengths, parts, lives, present) != 0) return -1;
    // The union, as one container: the chunk itself when there is one; arrays
    // that fit one array merged, smallest first, into the scratch's two halves
    // in turn; anything else ORed into the scratch's words.
    uint64_t *words = scratch;
    uint16_t *result = (uint16_t *)((unsigned char *)scratch + kBitsetBytes);
    uint16_t *spare = result + kMaxArray + kSortedUnionSlack;
    slice_t u = parts[0];
    if (n > 1) {
        int all_arrays = 1;
        int64_t values = 0;
        for (size_t i = 0; i < n; i++) {
            all_arrays &= parts[i].type == kArray;
            values += parts[i].count;
        }
        // With AVX-512, arrays of many values are ORed into words and counted in
        // one vector pass against live bitsets, rather than merged and then looked
        // up value by value in both live sets.
        int lives_are_bitsets = 1;
        for (int i = 0; i < 2; i++) lives_are_bitsets &= !present[i] || lives[i].type == kBitset;
        int by_words = vector && values >= kUnionByWordsValues && lives_are_bitsets && topicstore_has_vector_kernels();
        if (all_arrays && values <= kMaxArray && !by_words) {
            for (size_t i = 1; i < n; i++) {  // smallest first (see `union_of_slices`)
                slice_t p = parts[i];
                size_t j = i;
                for (; j > 0 && parts[j - 1].count > p.count; j--) parts[j] = parts[j - 1];
                parts[j] = p;
            }
            size_t count = (size_t)parts[0].count;
            memcpy(result, parts[0].bytes, 2 * count);
            for (size_t i = 1; i < n; i++) {
                count = topicstore_sorted_union(result, count, (const uint16_t *)parts[i].bytes, (size_t)parts[i].count, spare);
                uint16_t *t = result; result = spare; spare = t;
            }
            u.type = kArray;
            u.bytes = (const unsigned char *)result;
            u.count = (int32_t)count;
        } else {
            memset(words, 0, kBitsetBytes);
            for (size_t i = 0; i < n; i++) topicstore_or_into_words(words, &parts[i]);
            u.type = kBitset;
            u.bytes = (const unsigned char *)words;
            u.count = 0;  // not read: counted below
        }
    }
    // A bitset, or runs enough to be spread into one, against live sets that are
    // bitsets (or none): all three counts in one pass, with AVX-512 where the CPU has it.
    int dense = u.type == kBitset || (u.type == kRun && u.count > kRunsToBitset);
    for (int i = 0; i < 2; i++) dense &= !present[i] || lives[i].type == kBitset;
    if (dense) {
        if (u.type == kRun) {
            memset(words, 0, kBitsetBytes);
            topicstore_or_into_words(words, &u);
            u.bytes = (const unsigned char *)words;
        }
        topicstore_count_words(u.bytes, present[0] ? lives[0].bytes : NULL, present[1] ? lives[1].bytes : NULL, counts, vector);
        return 0;
    }
    counts[0] = slice_cardinality(&u);
    counts[1] = counts[2] = 0;
    count_against_two(&u, lives, present, words, counts + 1);  // u is a run chunk when it uses `words`
    return 0;
}
