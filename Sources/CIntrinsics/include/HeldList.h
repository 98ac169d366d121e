#ifndef TOPICSTORE_HELD_LIST_H
#define TOPICSTORE_HELD_LIST_H

#include <stddef.h>
#include <stdint.h>

/// The name table's hash (`NameIndex` in Projections), in its steps: one
/// definition, which both the Swift lookups and `topicstore_gather_held` use.
/// A name is hashed from its length (`start`), each whole 8-byte
/// little-endian word (`word`), then its last 0-7 bytes as one word (`end`);
/// `project` mixes in the project id.
static inline uint64_t topicstore_name_hash_start(long count) {
    return (uint64_t)count * 0xD6E8FEB86659FD93ull;
}

static inline uint64_t topicstore_name_hash_word(uint64_t h, uint64_t word) {
    uint64_t m = (h ^ word) * 0xBF58476D1CE4E5B9ull;
    return m ^ (m >> 29);
}

static inline uint64_t topicstore_name_hash_end(uint64_t h, uint64_t tail) {
    return (h ^ tail) * 0xBF58476D1CE4E5B9ull;
}

/// The hash of a name of at most 16 bytes given as its two little-endian
/// words (zero beyond it) and its length: the same as hashing its bytes.
static inline uint64_t topicstore_short_name_hash(uint64_t word0, uint64_t word1, long length) {
    uint64_t h = topicstore_name_hash_start(length);
    if (length < 8) return topicstore_name_hash_end(h, word0);
    if (length < 16) return topicstore_name_hash_end(topicstore_name_hash_word(h, word0), word1);
    return topicstore_name_hash_end(topicstore_name_hash_word(topicstore_name_hash_word(h, word0), word1), 0);
}

static inline uint64_t topicstore_name_hash_project(uint32_t pid, uint64_t name_hash) {
    uint64_t x = (name_hash ^ ((uint64_t)pid * 0x9E3779B97F4A7C15ull)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/// One slot of the name table (`NameIndex.Slot` in Projections, which has
/// this layout; `HeldListTests` checks every offset): 32 bytes.
typedef struct topicstore_name_slot {
    /// A name of at most 12 bytes as two little-endian words (zero beyond it):
    /// the first word, and the low half of the second.
    uint64_t low;
    uint32_t high;
    uint32_t offset;
    uint32_t value;
    uint32_t tag;
    uint32_t pid;
    uint16_t length;
    /// 0: empty, 1: present, 2: removed.
    uint8_t state;
} topicstore_name_slot;

/// What a count reads of a topic directory entry (`TopicCache.Validity` with
/// its `InlineMembers`, which have this layout; `HeldListTests` checks it):
/// 32 bytes.
typedef struct topicstore_held_entry {
    /// The first sequence the entry holds for.
    uint64_t valid_from;
    uint32_t members[4];
    uint8_t count;
    /// 1 when `members` are all of the topic's members.
    uint8_t is_all;
    /// What each member reaches, one byte each from the lowest (0: not known).
    uint32_t reaches;
} topicstore_held_entry;

/// Looks up the `n` names of project `pid` in the name table `slots` (`size`
/// slots), each a name of at most 12 bytes given as its two little-endian
/// words (`words[2i]`, `words[2i + 1]`, zero beyond the name) and its length,
/// and gathers the members of the topic directory entry (`entries`, indexed
/// by a slot's value) each names, when that entry holds all of its topic's
/// members for a snapshot at `as_of`: the members at `values + *gathered`,
/// what they reach four bytes at `reaches + *gathered` (room for 4 past
/// `limit`), `*gathered` moved on; at most `limit` values in all. `found`
/// is room for `n` pointers, the entries found.
///
/// Returns how many names were gathered from the first: `n` when every one
/// was; else the index of the first name not held (not in the table,
/// removed, held by its slices, not valid yet) or not fitting, with what the
/// names before it gathered left in place.
///
/// The names' home slots are asked of memory 16 at a time before they are
/// probed (`NameIndex.lookupEach` does the same), each entry found as soon
/// as its slot is read, and the entries are read once every name is found.
/// The hashes are `NameIndex`'s for short names (`shortTag`); `HeldListTests`
/// checks both against each other.
long topicstore_gather_held(const topicstore_name_slot *slots, long size, uint32_t pid,
                            const uint64_t *words, const uint8_t *lengths, long n,
                            const topicstore_held_entry *entries, uint64_t as_of,
                            const topicstore_held_entry **found,
                            uint32_t *values, uint8_t *reaches, long *gathered, long limit);

/// `topicstore_gather_held` of the `n` Swift Strings at `strings` (an
/// array's elements), each read from the String value itself as
/// `String.smallUTF8Words` reads it (64-bit little-endian platforms): -1,
/// with nothing gathered, when one is not a small string of at most 12 bytes
/// (gather those through `topicstore_gather_held`). `HeldListTests` checks
/// this reading against `smallUTF8Words` for every length.
long topicstore_gather_held_strings(const topicstore_name_slot *slots, long size, uint32_t pid,
                                    const void *strings, long n,
                                    const topicstore_held_entry *entries, uint64_t as_of,
                                    const topicstore_held_entry **found,
                                    uint32_t *values, uint8_t *reaches, long *gathered, long limit);

/// `topicstore_gather_held_strings` of every name: a name not gathered (not
/// held, held by its slices, not valid for `as_of`, not fitting) is passed
/// over and its index written at `missed` (room for `n`), and the names after
/// it are gathered still. Returns how many were not gathered; -1, with nothing
/// gathered, when a String is not small or longer than 12 bytes.
long topicstore_gather_each_held_string(const topicstore_name_slot *slots, long size, uint32_t pid,
                                        const void *strings, long n,
                                        const topicstore_held_entry *entries, uint64_t as_of,
                                        const topicstore_held_entry **found,
                                        uint32_t *values, uint8_t *reaches, long *gathered, long limit,
                                        long *missed);

/// Counts the distinct values of the `n` at `values`, each by its reach
/// byte the first time it appears (`reaches[i]`; a member gathered twice
/// reaches the same either time, or is not known one of them): returns how
/// many there are, those whose reach is `ios` counted into `*ios_count`,
/// `android` into `*android_count`, `unreachable` ones left out, and the rest
/// (reach not known) written to the front of `values`, their number in
/// `*unknown` (count them from the recipient cache). Through a table of twice
/// as many slots as values, on the stack up to 512 values.
long topicstore_distinct_reaches(uint32_t *values, const uint8_t *reaches, long n,
                                 uint8_t ios, uint8_t android, uint8_t unreachable,
                                 long *ios_count, long *android_count, long *unknown);

#endif
