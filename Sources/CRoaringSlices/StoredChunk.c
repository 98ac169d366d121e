// See StoredChunk.h.
#include "StoredChunk.h"
#include "SortedArrays.h"

#include <roaring/roaring.h>
#include <roaring/containers/containers.h>

/// Reads a chunk in the compact format (schema 10): a tag byte, a zero byte,
/// and the container; its slice is the key's. 0 on success.
static int parse_compact(const unsigned char *p, size_t length, slice_t *out) {
    if (length < 2 || p[1] != 0) return -1;
    const unsigned char *data = p + 2;
    size_t rest = length - 2;
    switch (p[0]) {
    case kTagArray:
        if (rest == 0 || rest % 2 != 0 || rest / 2 > kMaxArray) return -1;  // an empty chunk is never stored
        out->type = kArray;
        out->bytes = data;
        out->count = (int32_t)(rest / 2);
        return 0;
    case kTagBitset: {
        if (rest != 2 + kBitsetBytes) return -1;
        uint32_t cardinality = (uint32_t)load16(data, 0) + 1;
        if (cardinality <= kMaxArray) return -1;  // an array, written as one
        out->type = kBitset;
        out->bytes = data + 2;
        out->count = (int32_t)cardinality;
        return 0;
    }
    case kTagRuns:
        if (rest == 0 || rest % 4 != 0) return -1;
        out->type = kRun;
        out->bytes = data;
        out->count = (int32_t)(rest / 4);
        return 0;
    default:
        return -1;
    }
}

/// Reads the one container of a stored chunk of slice `high`; 0 on success.
int topicstore_parse_stored(const unsigned char *p, size_t length, uint16_t high, slice_t *out) {
    if (length >= 1 && p[0] <= kTagRuns) return parse_compact(p, length, out);
    if (length < 4) return -1;
    uint32_t cookie = load32(p);
    size_t at;
    int run = 0;
    if (cookie == kCookieNoRun) {
        // cookie, container count, key and cardinality - 1, one offset.
        if (length < 16 || load32(p + 4) != 1) return -1;
        at = 8;
    } else if ((cookie & 0xFFFF) == kCookie) {
        // cookie with count - 1 in its high half, the run flags, key and
        // cardinality - 1; no offsets below four containers.
        if ((cookie >> 16) != 0 || length < 9) return -1;
        run = p[4] & 1;
        at = 5;
    } else {
        return -1;
    }
    if (load16(p + at, 0) != high) return -1;
    uint32_t cardinality = (uint32_t)load16(p + at, 1) + 1;
    at += cookie == kCookieNoRun ? 8 : 4;
    const unsigned char *data = p + at;
    size_t rest = length - at;
    if (run) {
        if (rest < 2) return -1;
        uint32_t runs = load16(data, 0);
        if (runs == 0 || rest != 2 + 4 * (size_t)runs) return -1;  // an empty chunk is never stored
        out->type = kRun;
        out->bytes = data + 2;
        out->count = (int32_t)runs;
    } else if (cardinality <= kMaxArray) {
        if (rest != 2 * (size_t)cardinality) return -1;
        out->type = kArray;
        out->bytes = data;
        out->count = (int32_t)cardinality;
    } else {
        if (rest != kBitsetBytes) return -1;
        out->type = kBitset;
        out->bytes = data;
        out->count = (int32_t)cardinality;
    }
    return 0;
}

/// Whether every stored run ends inside the slice: one that did not would make
/// CRoaring write past a bitset later. Branch-free, a run-heavy chunk (`all`)
/// has a thousand of them.
int topicstore_stored_runs_in_slice(const slice_t *s) {
    uint32_t bad = 0;
    for (int32_t i = 0; i < s->count; i++) bad |= (uint32_t)load16(s->bytes, 2 * i) + load16(s->bytes, 2 * i + 1) > 0xFFFF;
    return bad == 0;
}

/// Checks that stored values and runs ascend without overlapping and that
/// runs end inside the slice (the in-memory side is CRoaring's own and needs
/// no check).
int topicstore_stored_is_ordered(const slice_t *s) {
    if (s->type == kArray) {
        return topicstore_values_ascend(s->bytes, (size_t)s->count);
    } else if (s->type == kRun) {
        if (!topicstore_stored_runs_in_slice(s)) return 0;
        for (int32_t i = 1; i < s->count; i++)
            if (load16(s->bytes, 2 * i) <= (uint32_t)load16(s->bytes, 2 * i - 2) + load16(s->bytes, 2 * i - 1)) return 0;
    }
    return 1;
}

/// Whether the bit counts here may run: the stored bytes are little-endian,
/// and the POPCNT instruction is there (asked once).
int topicstore_can_count(void) {
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    return 0;  // decode the stored bytes instead
#endif
#if defined(__x86_64__)
    static int popcnt = -1;
    int has = __atomic_load_n(&popcnt, __ATOMIC_RELAXED);
    if (has < 0) {
        __builtin_cpu_init();
        has = __builtin_cpu_supports("popcnt") ? 1 : 0;
        __atomic_store_n(&popcnt, has, __ATOMIC_RELAXED);
    }
    return has;
#else
    return 1;
#endif
}

/// ORs the container `s` (in memory, or stored: its bytes are read with
/// loads that need no alignment) into the 1,024 words of `words`.
void topicstore_or_into_words(uint64_t *words, const slice_t *s) {
    switch (s->type) {
    case kBitset:
        for (size_t w = 0; w < kBitsetBytes / 8; w++) words[w] |= load64(s->bytes, w);
        break;
    case kArray:
        for (int32_t i = 0; i < s->count; i++) {
            uint16_t v = load16(s->bytes, i);
            words[v >> 6] |= UINT64_C(1) << (v & 63);
        }
        break;
    default:
        for (int32_t i = 0; i < s->count; i++) bitset_set_lenrange(words, load16(s->bytes, 2 * i), load16(s->bytes, 2 * i + 1));
        break;
    }
}

