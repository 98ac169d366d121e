// Counts of a boolean audience (`(t1 OR t2) AND NOT user.5 AND platform:ios`)
// in one slice, from the stored chunks of its topics and sets, with nothing
// built: every operand is read as a bitset (a stored bitset in place, any
// other container spread into scratch words once), and the expression is
// evaluated 64 words at a time, its result counted against both live sets in
// the same pass. Evaluating it with bitmaps built a container per operand and
// per operation, each a pass over 8 KiB, and counted the result in two more.
#include "CRoaringSlices.h"
#include "StoredChunk.h"

/// Words evaluated at a time: a block of every operand and of the stack stays in L1.
enum { kBlockWords = 64, kSliceWords = kBitsetBytes / 8 };

static const uint64_t kNoWords[kSliceWords];

/// A leaf's words: its stored bitset in place, or `spare` filled with its
/// values (`spare` is 8 KiB, 64-byte aligned); the empty slice for NULL.
/// NULL when a stored chunk is not one well-formed, ordered container of
/// slice `high`.
static const unsigned char *leaf_words(uint16_t high, const void *bytes, size_t length, uint8_t kind, uint64_t *spare) {
    if (bytes == NULL) return (const unsigned char *)kNoWords;
    if (kind == kExpressionLeafValues) {
        const uint16_t *values = bytes;
        memset(spare, 0, kBitsetBytes);
        for (size_t i = 0; i < length; i++) spare[values[i] >> 6] |= UINT64_C(1) << (values[i] & 63);
        return (const unsigned char *)spare;
    }
    slice_t s;
    if (topicstore_parse_stored(bytes, length, high, &s) != 0 || !topicstore_stored_is_ordered(&s)) return NULL;
    if (s.type == kBitset) return s.bytes;
    memset(spare, 0, kBitsetBytes);
    topicstore_or_into_words(spare, &s);
    return (const unsigned char *)spare;
}

/// Whether `program` is well-formed for `n` leaves: known operations, leaves
/// in range, the stack within `kMostExpressionDepth`, one value at the end.
static int program_is_valid(const uint16_t *program, size_t steps, size_t n) {
    int depth = 0;
    for (size_t i = 0; i < steps; i++) {
        uint8_t op = (uint8_t)(program[i] >> 8), leaf = (uint8_t)program[i];
        switch (op) {
        case kExpressionPush:
            if (leaf >= n || ++depth > kMostExpressionDepth) return 0;
            break;
        case kExpressionAnd: case kExpressionOr: case kExpressionAndNot:
            if (leaf >= n || depth < 1) return 0;
            break;
        case kExpressionAndTop: case kExpressionOrTop: case kExpressionAndNotTop:
            if (depth < 2) return 0;
            depth--;
            break;
        default:
            return 0;
        }
    }
    return depth == 1;
}

/// Evaluates the program over every block of the slice, counting the result
/// and its devices in both live sets as it goes. Compiled twice below: for
/// the x86-64 baseline with POPCNT, and for AVX-512 with its vector popcount,
/// where each loop of 64 words becomes eight instructions of eight words.
static inline __attribute__((always_inline)) void evaluate_counting(const uint16_t *program, size_t steps,
                                                                    const unsigned char *const *leaves,
                                                                    const unsigned char *const live[2], uint64_t *stack,
                                                                    int64_t counts[3]) {
    uint64_t total = 0, first = 0, second = 0;
    for (size_t block = 0; block < kSliceWords; block += kBlockWords) {
        uint64_t *top = stack - kBlockWords;  // the stack's top block (none yet)
        for (size_t i = 0; i < steps; i++) {
            uint8_t op = (uint8_t)(program[i] >> 8);
            const unsigned char *leaf = leaves[(uint8_t)program[i]] + 8 * block;
            switch (op) {
            case kExpressionPush:
                top += kBlockWords;
                for (size_t w = 0; w < kBlockWords; w++) top[w] = load64(leaf, w);
                break;
            case kExpressionAnd:
                for (size_t w = 0; w < kBlockWords; w++) top[w] &= load64(leaf, w);
                break;
            case kExpressionOr:
                for (size_t w = 0; w < kBlockWords; w++) top[w] |= load64(leaf, w);
                break;
            case kExpressionAndNot:
                for (size_t w = 0; w < kBlockWords; w++) top[w] &= ~load64(leaf, w);
                break;
            case kExpressionAndTop:
                for (size_t w = 0; w < kBlockWords; w++) top[w - kBlockWords] &= top[w];
                top -= kBlockWords;
                break;
            case kExpressionOrTop:
                for (size_t w = 0; w < kBlockWords; w++) top[w - kBlockWords] |= top[w];
                top -= kBlockWords;
                break;
            default:  // kExpressionAndNotTop (the program was checked)
                for (size_t w = 0; w < kBlockWords; w++) top[w - kBlockWords] &= ~top[w];
                top -= kBlockWords;
                break;
            }
        }
        const unsigned char *ios = live[0] + 8 * block, *android = live[1] + 8 * block;
        for (size_t w = 0; w < kBlockWords; w++) {
            uint64_t r = stack[w];
            total += (uint64_t)__builtin_popcountll(r);
            first += (uint64_t)__builtin_popcountll(r & load64(ios, w));
            second += (uint64_t)__builtin_popcountll(r & load64(android, w));
        }
    }
    counts[0] = (int64_t)total;
    counts[1] = (int64_t)first;
    counts[2] = (int64_t)second;
}

POPCNT_TARGET static void evaluate_counting_popcnt(const uint16_t *program, size_t steps, const unsigned char *const *leaves,
                                                   const unsigned char *const live[2], uint64_t *stack, int64_t counts[3]) {
    evaluate_counting(program, steps, leaves, live, stack, counts);
}

#if defined(__x86_64__)
__attribute__((target("popcnt,avx512f,avx512vl,avx512bw,avx512vpopcntdq")))
static void evaluate_counting_avx512(const uint16_t *program, size_t steps, const unsigned char *const *leaves,
                                     const unsigned char *const live[2], uint64_t *stack, int64_t counts[3]) {
    evaluate_counting(program, steps, leaves, live, stack, counts);
}
#endif

/// The values of the bitset `words` and how many of them the bitsets `first`
/// and `second` hold, in one pass (a union's counts; see `topicstore_count_words`).
/// `evaluate_counting` with a program of one leaf counts the same, but copies
/// each block to its stack first: `all` at 10M was 10-20% slower that way.
static inline __attribute__((always_inline)) void count_words(const unsigned char *words, const unsigned char *first,
                                                              const unsigned char *second, int64_t counts[3]) {
    uint64_t total = 0, a = 0, b = 0;
    for (size_t w = 0; w < kSliceWords; w++) {
        uint64_t r = load64(words, w);
        total += (uint64_t)__builtin_popcountll(r);
        a += (uint64_t)__builtin_popcountll(r & load64(first, w));
        b += (uint64_t)__builtin_popcountll(r & load64(second, w));
    }
    counts[0] = (int64_t)total;
    counts[1] = (int64_t)a;
    counts[2] = (int64_t)b;
}

POPCNT_TARGET static void count_words_popcnt(const unsigned char *words, const unsigned char *first,
                                             const unsigned char *second, int64_t counts[3]) {
    count_words(words, first, second, counts);
}

#if defined(__x86_64__)
__attribute__((target("popcnt,avx512f,avx512vl,avx512bw,avx512vpopcntdq")))
static void count_words_avx512(const unsigned char *words, const unsigned char *first, const unsigned char *second,
                               int64_t counts[3]) {
    count_words(words, first, second, counts);
}
#endif

int topicstore_has_vector_kernels(void) {
#if defined(__x86_64__)
    static int has = -1;  // not asked yet
    int h = __atomic_load_n(&has, __ATOMIC_RELAXED);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw")
            && __builtin_cpu_supports("avx512vpopcntdq");
        __atomic_store_n(&has, h, __ATOMIC_RELAXED);
    }
    return h;
#else
    return 0;
#endif
}

int topicstore_expression_counts(uint16_t high, const uint16_t *program, size_t steps,
                                 const void *const *leaves, const size_t *lengths, const uint8_t *kinds, size_t n,
                                 const void *const live[2], const size_t live_lengths[2], void *scratch, int64_t counts[3],
                                 int vector) {
    if (!topicstore_can_count() || n > kMostExpressionLeaves || !program_is_valid(program, steps, n)) return -1;
    uint64_t *spare = scratch;  // 8 KiB a leaf and a live set, then the stack
    const unsigned char *words[kMostExpressionLeaves];
    for (size_t i = 0; i < n; i++) {
        words[i] = leaf_words(high, leaves[i], lengths[i], kinds[i], spare);
        if (words[i] == NULL) return -1;
        if (words[i] == (const unsigned char *)spare) spare += kSliceWords;
    }
    const unsigned char *live_words[2];
    for (int i = 0; i < 2; i++) {
        live_words[i] = leaf_words(high, live[i], live_lengths[i], kExpressionLeafChunk, spare);
        if (live_words[i] == NULL) return -1;
        if (live_words[i] == (const unsigned char *)spare) spare += kSliceWords;
    }
#if defined(__x86_64__)
    if (vector && topicstore_has_vector_kernels()) {
        evaluate_counting_avx512(program, steps, words, live_words, spare, counts);
        return 0;
    }
#endif
    evaluate_counting_popcnt(program, steps, words, live_words, spare, counts);
    return 0;
}

void topicstore_count_words(const unsigned char *words, const unsigned char *first, const unsigned char *second,
                            int64_t counts[3], int vector) {
    if (first == NULL) first = (const unsigned char *)kNoWords;
    if (second == NULL) second = (const unsigned char *)kNoWords;
#if defined(__x86_64__)
    if (vector && topicstore_has_vector_kernels()) {
        count_words_avx512(words, first, second, counts);
        return;
    }
#endif
    count_words_popcnt(words, first, second, counts);
}
