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

/// Whether `program` is well-formed for `n` leaves: at most `kMostExpressionSteps`
/// steps, known operations, leaves in range, the stack within
/// `kMostExpressionDepth`, one value at the end.
static int program_is_valid(const uint16_t *program, size_t steps, size_t n) {
    if (steps > kMostExpressionSteps) return 0;
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

/// A slice's program as it runs: the steps whose leaf is empty there and
/// that leave the top as it is (an OR or AND NOT of no devices) left out, a
/// push and the leaf step after it made one pass (`kPlanPush + op`), and the
/// last leaf step taken into the counting pass. At 10M devices an audience
/// like `(t1 OR t2) AND NOT user.5 AND platform:ios` stored and loaded its
/// stack's block at every step, ten loads and four stores a word; its plan
/// in a slice without user.5 is one pass storing `t1 | t2` and the count,
/// reading `∩ ios` on the way.
enum { kPlanPush = 8 };  // kPlanPush + kExpressionAnd/Or/AndNot: push a ∘ b
typedef struct {
    uint8_t op;
    const unsigned char *a, *b;
} plan_step_t;

typedef struct {
    plan_step_t steps[kMostExpressionSteps];
    size_t count;
    /// The last leaf step, done in the counting pass (kExpressionPush: none).
    uint8_t last;
    const unsigned char *last_leaf;
} plan_t;

/// Whether a step's low byte names a leaf (a push, or a combination with a leaf).
static inline int takes_leaf(uint8_t op) {
    return op == kExpressionPush || op == kExpressionAnd || op == kExpressionOr || op == kExpressionAndNot;
}

/// The plan of a well-formed `program` over the leaves' `words` (kNoWords for an empty one).
static void make_plan(const uint16_t *program, size_t steps, const unsigned char *const *words, plan_t *plan) {
    plan->count = 0;
    plan->last = kExpressionPush;
    plan->last_leaf = NULL;
    size_t end = steps;
    // The last step, when it combines the top with a leaf: `program_is_valid` ended it with one value.
    for (; end > 0; end--) {
        uint8_t op = (uint8_t)(program[end - 1] >> 8);
        if (!takes_leaf(op)) break;
        const unsigned char *leaf = words[(uint8_t)program[end - 1]];
        if ((op == kExpressionOr || op == kExpressionAndNot) && leaf == (const unsigned char *)kNoWords) continue;
        if (end > 1 && op != kExpressionPush) {
            plan->last = op;
            plan->last_leaf = leaf;
            end--;
        }
        break;
    }
    for (size_t i = 0; i < end; i++) {
        uint8_t op = (uint8_t)(program[i] >> 8);
        const unsigned char *leaf = takes_leaf(op) ? words[(uint8_t)program[i]] : NULL;
        if ((op == kExpressionOr || op == kExpressionAndNot) && leaf == (const unsigned char *)kNoWords) continue;
        plan_step_t *previous = plan->count > 0 ? &plan->steps[plan->count - 1] : NULL;
        if ((op == kExpressionAnd || op == kExpressionOr || op == kExpressionAndNot) && previous != NULL
            && previous->op == kExpressionPush) {
            previous->op = (uint8_t)(kPlanPush + op);
            previous->b = leaf;
            continue;
        }
        plan->steps[plan->count++] = (plan_step_t){op, leaf, NULL};
    }
}

/// `x ∘ y` for a leaf step's operation; `x` for none.
static inline __attribute__((always_inline)) uint64_t apply_op(uint8_t op, uint64_t x, uint64_t y) {
    switch (op) {
    case kExpressionAnd: return x & y;
    case kExpressionOr: return x | y;
    case kExpressionAndNot: return x & ~y;
    default: return x;
    }
}

/// Counts the block `base ∘ leaf` (`op` a leaf step's operation, or
/// kExpressionPush for `base` alone) into `sums[0]`, and its devices in
/// `first` and `second` into `sums[1]` and `sums[2]`; with `one` set, only in
/// `first` (the result lies in the other live set, which holds all of it). `op`
/// and `one` are constants where it is inlined, so that each loop is branch-free.
static inline __attribute__((always_inline)) void count_block(const unsigned char *base, uint8_t op,
                                                              const unsigned char *leaf, const unsigned char *first,
                                                              const unsigned char *second, int one, uint64_t sums[3]) {
    uint64_t total = 0, a = 0, b = 0;
    for (size_t w = 0; w < kBlockWords; w++) {
        uint64_t r = apply_op(op, load64(base, w), op == kExpressionPush ? 0 : load64(leaf, w));
        total += (uint64_t)__builtin_popcountll(r);
        a += (uint64_t)__builtin_popcountll(r & load64(first, w));
        if (!one) b += (uint64_t)__builtin_popcountll(r & load64(second, w));
    }
    sums[0] += total;
    sums[1] += a;
    sums[2] += b;
}

/// Evaluates the plan over every block of the slice, counting the result and
/// its devices in both live sets as it goes. Compiled three times below: for
/// the x86-64 baseline with POPCNT; for AVX2, where the compiler counts four
/// words at a time by nibbles (`vpshufb`); and for AVX-512 with its vector
/// popcount, where each loop of 64 words becomes eight instructions of eight words.
static inline __attribute__((always_inline)) void evaluate_counting(const plan_t *plan, const unsigned char *const live[2],
                                                                    uint64_t *stack, int64_t counts[3]) {
    uint64_t sums[3] = {0, 0, 0};
    // A result that is `x ∩ live` holds all its devices in that live set: the
    // other one alone is counted against it (`count_block`'s `one`).
    int first_is_total = plan->last == kExpressionAnd && plan->last_leaf == live[0];
    int second_is_total = plan->last == kExpressionAnd && plan->last_leaf == live[1] && !first_is_total;
    const unsigned char *first = first_is_total ? live[1] : live[0], *second = live[1];
    // A plan of one push counts its leaf in place, with nothing stored.
    int in_place = plan->count == 1 && plan->steps[0].op == kExpressionPush;
    for (size_t block = 0; block < kSliceWords; block += kBlockWords) {
        uint64_t *top = NULL;  // the stack's top block (none yet)
        for (size_t i = 0; i < plan->count && !in_place; i++) {
            const plan_step_t *step = &plan->steps[i];
            // A step combining two tops has no leaf, and only a fused push has a second one.
            const unsigned char *a = step->a != NULL ? step->a + 8 * block : NULL;
            const unsigned char *b = step->b != NULL ? step->b + 8 * block : NULL;
            switch (step->op) {
            case kExpressionPush:
                top = top == NULL ? stack : top + kBlockWords;
                for (size_t w = 0; w < kBlockWords; w++) top[w] = load64(a, w);
                break;
            case kPlanPush + kExpressionAnd:
                top = top == NULL ? stack : top + kBlockWords;
                for (size_t w = 0; w < kBlockWords; w++) top[w] = load64(a, w) & load64(b, w);
                break;
            case kPlanPush + kExpressionOr:
                top = top == NULL ? stack : top + kBlockWords;
                for (size_t w = 0; w < kBlockWords; w++) top[w] = load64(a, w) | load64(b, w);
                break;
            case kPlanPush + kExpressionAndNot:
                top = top == NULL ? stack : top + kBlockWords;
                for (size_t w = 0; w < kBlockWords; w++) top[w] = load64(a, w) & ~load64(b, w);
                break;
            case kExpressionAnd:
                for (size_t w = 0; w < kBlockWords; w++) top[w] &= load64(a, w);
                break;
            case kExpressionOr:
                for (size_t w = 0; w < kBlockWords; w++) top[w] |= load64(a, w);
                break;
            case kExpressionAndNot:
                for (size_t w = 0; w < kBlockWords; w++) top[w] &= ~load64(a, w);
                break;
            case kExpressionAndTop:
                for (size_t w = 0; w < kBlockWords; w++) (top - kBlockWords)[w] &= top[w];
                top -= kBlockWords;
                break;
            case kExpressionOrTop:
                for (size_t w = 0; w < kBlockWords; w++) (top - kBlockWords)[w] |= top[w];
                top -= kBlockWords;
                break;
            default:  // kExpressionAndNotTop (the program was checked)
                for (size_t w = 0; w < kBlockWords; w++) (top - kBlockWords)[w] &= ~top[w];
                top -= kBlockWords;
                break;
            }
        }
        const unsigned char *base = in_place ? plan->steps[0].a + 8 * block : (const unsigned char *)stack;
        const unsigned char *leaf = plan->last_leaf != NULL ? plan->last_leaf + 8 * block : NULL;
        const unsigned char *f = first + 8 * block, *s = second + 8 * block;
        switch (plan->last) {
        case kExpressionAnd:
            if (first_is_total || second_is_total) count_block(base, kExpressionAnd, leaf, f, s, 1, sums);
            else count_block(base, kExpressionAnd, leaf, f, s, 0, sums);
            break;
        case kExpressionOr: count_block(base, kExpressionOr, leaf, f, s, 0, sums); break;
        case kExpressionAndNot: count_block(base, kExpressionAndNot, leaf, f, s, 0, sums); break;
        default: count_block(base, kExpressionPush, NULL, f, s, 0, sums); break;
        }
    }
    counts[0] = (int64_t)sums[0];
    counts[1] = (int64_t)(first_is_total ? sums[0] : sums[1]);
    counts[2] = (int64_t)(first_is_total ? sums[1] : second_is_total ? sums[0] : sums[2]);
}

POPCNT_TARGET static void evaluate_counting_popcnt(const plan_t *plan, const unsigned char *const live[2], uint64_t *stack,
                                                   int64_t counts[3]) {
    evaluate_counting(plan, live, stack, counts);
}

#if defined(__x86_64__)
__attribute__((target("popcnt,avx2")))
static void evaluate_counting_avx2(const plan_t *plan, const unsigned char *const live[2], uint64_t *stack,
                                   int64_t counts[3]) {
    evaluate_counting(plan, live, stack, counts);
}

__attribute__((target("popcnt,avx512f,avx512vl,avx512bw,avx512vpopcntdq")))
static void evaluate_counting_avx512(const plan_t *plan, const unsigned char *const live[2], uint64_t *stack,
                                     int64_t counts[3]) {
    evaluate_counting(plan, live, stack, counts);
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
__attribute__((target("popcnt,avx2")))
static void count_words_avx2(const unsigned char *words, const unsigned char *first, const unsigned char *second,
                             int64_t counts[3]) {
    count_words(words, first, second, counts);
}

__attribute__((target("popcnt,avx512f,avx512vl,avx512bw,avx512vpopcntdq")))
static void count_words_avx512(const unsigned char *words, const unsigned char *first, const unsigned char *second,
                               int64_t counts[3]) {
    count_words(words, first, second, counts);
}
#endif

/// The counting kernels' vector choice for this CPU (asked once): AVX-512
/// with its vector popcount, else AVX2, else none (the x86-64 baseline).
enum { kKernelBaseline = 0, kKernelAVX2 = 1, kKernelAVX512 = 2 };
static int vector_kernel(void) {
#if defined(__x86_64__)
    static int kernel = -1;  // not asked yet
    int k = __atomic_load_n(&kernel, __ATOMIC_RELAXED);
    if (k < 0) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw")
            && __builtin_cpu_supports("avx512vpopcntdq")) {
            k = kKernelAVX512;
        } else {
            k = __builtin_cpu_supports("avx2") ? kKernelAVX2 : kKernelBaseline;
        }
        __atomic_store_n(&kernel, k, __ATOMIC_RELAXED);
    }
    return k;
#else
    return kKernelBaseline;
#endif
}

int topicstore_has_vector_kernels(void) {
    return vector_kernel() == kKernelAVX512;
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
    plan_t plan;
    make_plan(program, steps, words, &plan);
    switch (vector ? vector_kernel() : kKernelBaseline) {
#if defined(__x86_64__)
    case kKernelAVX512: evaluate_counting_avx512(&plan, live_words, spare, counts); break;
    case kKernelAVX2: evaluate_counting_avx2(&plan, live_words, spare, counts); break;
#endif
    default: evaluate_counting_popcnt(&plan, live_words, spare, counts); break;
    }
    return 0;
}

void topicstore_count_words(const unsigned char *words, const unsigned char *first, const unsigned char *second,
                            int64_t counts[3], int vector) {
    if (first == NULL) first = (const unsigned char *)kNoWords;
    if (second == NULL) second = (const unsigned char *)kNoWords;
    switch (vector ? vector_kernel() : kKernelBaseline) {
#if defined(__x86_64__)
    case kKernelAVX512: count_words_avx512(words, first, second, counts); break;
    case kKernelAVX2: count_words_avx2(words, first, second, counts); break;
#endif
    default: count_words_popcnt(words, first, second, counts); break;
    }
}
