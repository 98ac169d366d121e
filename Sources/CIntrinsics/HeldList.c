#include "HeldList.h"

#include <stdlib.h>
#include <string.h>

// The tag `NameIndex` keeps for a short name: the high half of its hash.
static inline uint32_t short_tag(uint32_t pid, uint64_t word0, uint64_t word1, long length) {
    return (uint32_t)(topicstore_name_hash_project(pid, topicstore_short_name_hash(word0, word1, length)) >> 32);
}

// `NameIndex.home`: the first slot of the cache line the tag picks.
static inline long home(uint32_t tag, long size) {
    return (long)(((uint64_t)tag * (uint64_t)size) >> 32) & ~1L;
}

enum { group = 16 };

// A name's words and length: from the arrays given, or from a Swift String
// value's two words (`strings`), as `String.smallUTF8Words` reads them: on
// 64-bit little-endian platforms a small string (bit 61 of its second word)
// keeps its UTF-8 bytes in order in the two words, zero beyond them, and
// its count in the low nibble of the last byte. -1: not a small string of
// at most 12 bytes (`NameIndex.inlineName`).
static inline __attribute__((always_inline)) long name_at(const uint64_t *words, const uint8_t *lengths, int strings, long i,
                           uint64_t *low, uint64_t *high) {
    *low = words[2 * i];
    if (!strings) {
        *high = words[2 * i + 1];
        return lengths[i];
    }
    uint64_t raw = words[2 * i + 1];
    long count = (long)(raw >> 56) & 0xF;
    if (!(raw & (1ull << 61)) || count > 12) return -1;
    *high = raw & 0x00FFFFFFFFFFFFFFull;
    return count;
}

// Looks up and gathers the names; with `missed`, every name on (the indices
// of those not gathered written there, their number returned), else up to
// the first name not gathered (its index returned; n when none).
static inline __attribute__((always_inline)) long gather_held(const topicstore_name_slot *slots, long size, uint32_t pid,
                               const uint64_t *words, const uint8_t *lengths, int strings, long n,
                               const topicstore_held_entry *entries, uint64_t as_of,
                               const topicstore_held_entry **found,
                               uint32_t *values, uint8_t *reaches, long *gathered, long limit, long *missed) {
    // Every name looked up first, each entry found asked of memory, and
    // gathered after: the entries of a list of users not asked lately are
    // cache misses, which gathered as each name was found were waited for
    // one after another.
    long looked = 0;
    while (looked < n) {
        long start = looked, end = n - start < group ? n : start + group;
        long homes[group];
        uint32_t tags[group];
        // The group's home slots asked of memory...
        for (long i = start; i < end; i++) {
            uint64_t low, high;
            long length = name_at(words, lengths, strings, i, &low, &high);
            if (length < 0) return -1;
            uint32_t tag = short_tag(pid, low, high, length);
            tags[i - start] = tag;
            homes[i - start] = home(tag, size);
            __builtin_prefetch(slots + homes[i - start], 0, 3);
        }
        // ...then probed: the slot of this name, or an empty one.
        for (long i = start; i < end; i++) {
            uint64_t low, high64;
            uint16_t length = (uint16_t)name_at(words, lengths, strings, i, &low, &high64);
            uint32_t tag = tags[i - start], high = (uint32_t)high64;
            long b = homes[i - start];
            const topicstore_name_slot *s = slots + b;
            while (s->state != 0 &&
                   !(s->tag == tag && s->pid == pid && s->length == length && s->low == low && s->high == high)) {
                b = b + 1 == size ? 0 : b + 1;
                s = slots + b;
            }
            if (s->state != 1) {
                // Not held (or removed).
                found[i] = NULL;
                if (missed) continue;
                // What the names before it found is gathered.
                n = i;
                break;
            }
            found[i] = entries + s->value;
            __builtin_prefetch(found[i], 0, 3);
        }
        looked = end < n ? end : n;
    }
    long at = *gathered, misses = 0;
    for (long i = 0; i < n; i++) {
        const topicstore_held_entry *e = found[i];
        // (Only names passed over with `missed` have no entry.)
        if (missed && !e) {
            missed[misses++] = i;
            continue;
        }
        long count = e->count;
        if (e->valid_from > as_of || !e->is_all || count > 4 || count > limit - at) {
            if (missed) {
                missed[misses++] = i;
                continue;
            }
            *gathered = at;
            return i;
        }
        for (long k = 0; k < count; k++) values[at + k] = e->members[k];
        memcpy(reaches + at, &e->reaches, 4);
        at += count;
    }
    *gathered = at;
    return missed ? misses : n;
}

long topicstore_gather_held(const topicstore_name_slot *slots, long size, uint32_t pid,
                            const uint64_t *words, const uint8_t *lengths, long n,
                            const topicstore_held_entry *entries, uint64_t as_of,
                            const topicstore_held_entry **found,
                            uint32_t *values, uint8_t *reaches, long *gathered, long limit) {
    return gather_held(slots, size, pid, words, lengths, 0, n, entries, as_of, found, values, reaches, gathered, limit,
                       NULL);
}

long topicstore_gather_held_strings(const topicstore_name_slot *slots, long size, uint32_t pid,
                                    const void *strings, long n,
                                    const topicstore_held_entry *entries, uint64_t as_of,
                                    const topicstore_held_entry **found,
                                    uint32_t *values, uint8_t *reaches, long *gathered, long limit) {
    return gather_held(slots, size, pid, (const uint64_t *)strings, NULL, 1, n, entries, as_of, found, values, reaches,
                       gathered, limit, NULL);
}

long topicstore_gather_each_held_string(const topicstore_name_slot *slots, long size, uint32_t pid,
                                        const void *strings, long n,
                                        const topicstore_held_entry *entries, uint64_t as_of,
                                        const topicstore_held_entry **found,
                                        uint32_t *values, uint8_t *reaches, long *gathered, long limit,
                                        long *missed) {
    return gather_held(slots, size, pid, (const uint64_t *)strings, NULL, 1, n, entries, as_of, found, values, reaches,
                       gathered, limit, missed);
}

long topicstore_distinct_reaches(uint32_t *values, const uint8_t *reaches, long n,
                                 uint8_t ios, uint8_t android, uint8_t unreachable,
                                 long *ios_count, long *android_count, long *unknown) {
    long unique = 0, i = 0, a = 0, u = 0;
    // Each value's first time counted by its reach; one not known written
    // back at the front (never past the value being read).
#define TOPICSTORE_COUNT_NEW(v, r)          \
    do {                                    \
        unique++;                           \
        if ((r) == ios) {                   \
            i++;                            \
        } else if ((r) == android) {        \
            a++;                            \
        } else if ((r) != unreachable) {    \
            values[u++] = (v);              \
        }                                   \
    } while (0)
    if (n == 1) {
        TOPICSTORE_COUNT_NEW(values[0], reaches[0]);
    } else if (n > 1) {
        // A table of at least twice as many slots, each value + 1 (0: empty).
        int bits = 4;
        while ((1L << bits) < 2 * n) bits++;
        long size = 1L << bits, mask = size - 1;
        uint64_t local[1024];
        uint64_t *table = size <= 1024 ? local : malloc((size_t)size * sizeof(uint64_t));
        if (table == NULL) abort();
        memset(table, 0, (size_t)size * sizeof(uint64_t));
        for (long j = 0; j < n; j++) {
            uint32_t v = values[j];
            uint64_t key = (uint64_t)v + 1;
            long slot = (long)(((uint64_t)v * 0x9E3779B97F4A7C15ull) >> (64 - bits));
            while (table[slot] != key) {
                if (table[slot] == 0) {
                    table[slot] = key;
                    TOPICSTORE_COUNT_NEW(v, reaches[j]);
                    break;
                }
                slot = (slot + 1) & mask;
            }
        }
        if (table != local) free(table);
    }
#undef TOPICSTORE_COUNT_NEW
    *ios_count = i;
    *android_count = a;
    *unknown = u;
    return unique;
}
