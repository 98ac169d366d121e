#ifndef TOPICSTORE_CROARINGSLICES_H
#define TOPICSTORE_CROARINGSLICES_H

#include <stddef.h>
#include <stdint.h>

/// Counts the values that a CRoaring bitmap (`bitmap`, a `roaring_bitmap_t *`)
/// holds in slice `high` (values `high << 16` to `high << 16 | 0xFFFF`) and that
/// `stored` also holds, where `stored` is one posting chunk of that slice as
/// topicstore keeps one per LMDB value: one container, in the compact format
/// or the portable format of older stores (see `topicstore_chunk_write`).
/// The stored bytes are read in place: nothing is
/// allocated or copied, and bit counts use the POPCNT instruction where the CPU
/// has it (Debian's libroaring is built for the x86-64 baseline, without it).
///
/// Returns the count, or -1 when `stored` is not one well-formed container of
/// slice `high` that fits its `length` bytes exactly; the caller then decodes
/// it the ordinary way, which reports what is wrong. Every read stays inside
/// the `length` bytes, whatever they hold.
int64_t topicstore_slice_intersection_count(const void *bitmap, uint16_t high,
                                            const void *stored, size_t length);

/// `topicstore_slice_intersection_count` for two stored chunks of slice
/// `high` at once (the two live sets of an audience count): `counts[i]`
/// receives the count for `stored[i]`, 0 where `stored[i]` is NULL (no
/// chunk). A container of many runs in `bitmap` (`all`) is spread into a
/// bitset once for both, where counting each run against each stored bitset
/// cost a masked popcount per run. Returns 0, or -1 when either chunk is
/// not one well-formed container of slice `high` (count them one by one then).
int topicstore_slice_intersection_counts(const void *bitmap, uint16_t high, const void *const stored[2],
                                         const size_t lengths[2], int64_t counts[2]);

/// Appends the container of `stored` (a one-container chunk of slice `high`,
/// as above) to `bitmap` (a `roaring_bitmap_t *`) whose slices are all below
/// `high`: one allocation and one copy, where decoding it into a bitmap of its
/// own and taking the union took several. Returns 0, or -1 (and changes
/// nothing) when `stored` is not one well-formed container of slice `high` or
/// `bitmap` already reaches slice `high`.
int topicstore_slice_append(void *bitmap, uint16_t high, const void *stored, size_t length);

/// Appends to `bitmap` (a `roaring_bitmap_t *` whose slices are all below
/// `high`) the container of slice `high` holding `values` (low 16 bits,
/// strictly ascending): an array container, or a bitset beyond 4,096 values,
/// as CRoaring itself would hold them. Returns 0, or -1 (and changes nothing)
/// when `values` is empty or not strictly ascending, `bitmap` already reaches
/// slice `high`, or memory runs out.
int topicstore_slice_append_sorted(void *bitmap, uint16_t high, const uint16_t *values, size_t count);

/// The number of values in `stored` (a one-container chunk of slice `high`,
/// as above), counted from its values, not taken from its header; -1 when it
/// is not one well-formed container of slice `high`, or when the CPU lacks POPCNT.
int64_t topicstore_slice_cardinality(uint16_t high, const void *stored, size_t length);

/// Writes the values of `stored` (a one-container chunk of slice `high`, as
/// above), ascending and with the slice in their high 16 bits, to `out`, which
/// has room for `capacity`; returns how many. Returns -2 (with `out` unspecified)
/// when the chunk holds more than `capacity` values or is a bitset, and -1 when
/// it is not one well-formed, ordered container of slice `high`: the caller
/// then reads the chunk the ordinary way (which reports a corrupt one).
int64_t topicstore_slice_values(uint16_t high, const void *stored, size_t length, uint32_t *out, size_t capacity);

/// Turns every run container of `bitmap` (a `roaring_bitmap_t *`) into an
/// array or a bitset, as `roaring_bitmap_remove_run_compression` does. Debian's
/// libroaring (0.2.66) loops forever there, writing past the array it fills,
/// on a run that ends at the slice's last value (65535) when the container
/// holds at most 4,096 values: its loop counter is 16 bits. Returns 0, or -1
/// when an allocation failed (the containers done so far stay converted).
int topicstore_remove_run_compression(void *bitmap);

/// Intersects the container of slice `high` of `bitmap` (a `roaring_bitmap_t *`)
/// with the stored chunk `stored` of that slice, in place, without copying the
/// chunk; a container left empty is removed. 0 when done (also when the bitmap
/// has nothing in that slice); -1 when `stored` is not one well-formed container
/// of the slice or the CPU lacks POPCNT, -2 for a pair of kinds this does not do
/// (runs on either side): the bitmap is unchanged
/// in both; -3 when an allocation failed (the slice then holds the intersection
/// as a bitset, whatever its size).
int topicstore_slice_intersect_stored(void *bitmap, uint16_t high, const void *stored, size_t length);

/// Removes the container of slice `high` from `bitmap`; 1 when there was one.
int topicstore_remove_slice(void *bitmap, uint16_t high);

/// Turns every run container of more than `most_runs` runs that holds more
/// than 4,096 values into a bitset. 0, or -1 when an allocation failed.
int topicstore_bitsets_for_many_runs(void *bitmap, int32_t most_runs);

/// 1 when every container of `bitmap` (a `roaring_bitmap_t *`) already has the
/// encoding `Bitmap.optimize(mostRuns:)` would choose for it (so optimizing
/// would change nothing that is written), else 0. Reads only; counts runs
/// only as far as the choice needs.
int topicstore_has_canonical_encoding(const void *bitmap, int32_t most_runs);

/// The number of containers (slices) in `bitmap` (a `roaring_bitmap_t *`),
/// and their keys: `keys` receives at most `capacity` of them, ascending.
int32_t topicstore_slice_keys(const void *bitmap, uint16_t *keys, int32_t capacity);

/// The union of the `count` CRoaring bitmaps of `bitmaps` (each a
/// `roaring_bitmap_t *`), as a new bitmap, or NULL when an allocation failed or
/// the CPU lacks POPCNT (the caller then asks CRoaring). Slice by slice: a
/// container only one bitmap has is copied; arrays that fit one array
/// together are merged; anything else is ORed into 8 KiB of scratch and
/// counted once, kept as a bitset or, at 4,096 values or fewer, an array.
/// CRoaring's `or_many` made every such container a bitset, counted without
/// POPCNT in Debian's build, and turned most back into arrays: a count of
/// three mid topics as one audience spent most of its time there.
void *topicstore_union_many(const void *const *bitmaps, size_t count);

/// `x` ∩ `y` and `x` \ `y` of two CRoaring bitmaps (`roaring_bitmap_t *`) as
/// a new bitmap, or NULL when an allocation failed or the CPU lacks POPCNT
/// (the caller then asks CRoaring). Where both have a bitset for a slice,
/// the words are combined and counted here with POPCNT; CRoaring's own
/// bitset functions count them one word at a time through a software
/// popcount in Debian's build, which was a third of a boolean audience's
/// time. Other pairs of containers go to CRoaring's container functions.
void *topicstore_intersection(const void *x, const void *y);
void *topicstore_difference(const void *x, const void *y);

/// At most how many chunks `topicstore_union_counts` takes at once.
enum { kMostUnionCounted = 64 };
/// The bytes of scratch `topicstore_union_counts` needs (64-byte aligned).
enum { kUnionCountsScratchBytes = 8192 + 4 * (4096 + 8) };

/// Counts the union of the `n` stored chunks `stored[i]` (`lengths[i]`
/// bytes each; one-container chunks of slice `high`, as above: the topics of
/// an OR) into `counts[0]`, and how many of its values the stored chunks
/// `live[0]` and `live[1]` also hold (the live sets of both platforms; NULL:
/// no chunk, none) into `counts[1]` and `counts[2]`. Nothing is built or
/// allocated: arrays that fit one array are merged in `scratch`
/// (`kUnionCountsScratchBytes`, 64-byte aligned), anything else is ORed
/// into a bitset there. Returns 0, or -1 when a chunk is not one well-formed
/// container of slice `high`, `n` is 0 or above `kMostUnionCounted`, or the
/// CPU lacks POPCNT (count the ordinary way then, which reports damage). A
/// dense union is counted with AVX-512, or else AVX2, where the CPU has it,
/// unless `vector` is 0.
int topicstore_union_counts(uint16_t high, const void *const *stored, const size_t *lengths, size_t n,
                            const void *const live[2], const size_t live_lengths[2], void *scratch, int64_t counts[3],
                            int vector);

/// The steps of an audience's program for `topicstore_expression_counts`, in
/// postfix order, each `op << 8 | leaf`: push a leaf; combine the top of the
/// stack with a leaf; or combine the two top values into one.
enum {
    kExpressionPush = 0,
    kExpressionAnd = 1,        ///< top = top ∩ leaf
    kExpressionOr = 2,         ///< top = top ∪ leaf
    kExpressionAndNot = 3,     ///< top = top \ leaf
    kExpressionAndTop = 4,     ///< pop b; top = top ∩ b
    kExpressionOrTop = 5,      ///< pop b; top = top ∪ b
    kExpressionAndNotTop = 6,  ///< pop b; top = top \ b
};
/// A leaf is a stored chunk, or (from memory) ascending 16-bit values.
enum { kExpressionLeafChunk = 0, kExpressionLeafValues = 1 };
/// At most how many leaves, how deep a stack and how many steps a program has.
enum { kMostExpressionLeaves = 32, kMostExpressionDepth = 16, kMostExpressionSteps = 256 };
/// The scratch `topicstore_expression_counts` needs for `n` leaves (64-byte aligned).
#define TOPICSTORE_EXPRESSION_SCRATCH_BYTES(n) ((size_t)((n) + 2) * 8192 + (size_t)kMostExpressionDepth * 512)

/// Counts the devices of an audience in slice `high`: `program` (`steps`
/// steps, see above) over the `n` leaves `leaves[i]`, each a stored
/// one-container chunk of the slice (`kinds[i]` kExpressionLeafChunk,
/// `lengths[i]` bytes) or ascending 16-bit values (kExpressionLeafValues,
/// `lengths[i]` values); NULL is the empty set. `counts[0]` receives the
/// result's size, `counts[1]` and `counts[2]` how many of its devices the
/// stored chunks `live[0]` and `live[1]` (NULL: none) hold. Every operand is
/// read as a bitset, a stored one in place, and the result is counted as it
/// is evaluated, 64 words at a time: nothing is built or allocated (`scratch`:
/// `TOPICSTORE_EXPRESSION_SCRATCH_BYTES(n)`, 64-byte aligned). Returns 0, or
/// -1 when the program is not well-formed, a chunk is not one well-formed,
/// ordered container of slice `high`, or the CPU lacks POPCNT (count the
/// ordinary way then, which reports damage). `vector` 0 keeps to the x86-64
/// baseline (with POPCNT) where the CPU has AVX-512 or AVX2 (tests count both ways).
int topicstore_expression_counts(uint16_t high, const uint16_t *program, size_t steps,
                                 const void *const *leaves, const size_t *lengths, const uint8_t *kinds, size_t n,
                                 const void *const live[2], const size_t live_lengths[2], void *scratch, int64_t counts[3],
                                 int vector);

/// Whether the CPU has AVX-512 with its vector popcount, which the counts
/// of `topicstore_expression_counts` and `topicstore_union_counts` use when
/// their `vector` is non-zero (asked once).
int topicstore_has_vector_kernels(void);

/// The bytes of `bitmap` (a `roaring_bitmap_t *` of exactly one container) as
/// a stored chunk in the compact format: a tag byte (1 an
/// array, 2 a bitset, 3 runs), a zero byte, then the container, little-endian:
/// an array's values; a bitset's cardinality - 1 (16 bits) and its 1,024 words;
/// runs as (start, length - 1) pairs. The slice is not written: it is the
/// key's. The portable format took 16 bytes of header for an array (cookie,
/// count, key, cardinality, offset), where most chunks hold a few values.
/// Returns the size, or -1 when `bitmap` does not hold exactly one container.
int64_t topicstore_chunk_size(const void *bitmap);

/// Writes `bitmap` as `topicstore_chunk_size` describes into `out`, which has
/// room for `capacity` bytes; returns the bytes written, or -1 (nothing
/// written) when it does not hold one container or does not fit.
int64_t topicstore_chunk_write(const void *bitmap, void *out, size_t capacity);

/// Writes a chunk of slice `high` in the compact format (`stored`, `length`)
/// as the portable serialization of the same one-container bitmap into `out`
/// (room for `capacity` bytes, `length` + 16 always suffice), for readers
/// that decode with CRoaring. Returns the bytes written, or -1 when `stored`
/// is not a well-formed compact chunk or does not fit.
int64_t topicstore_chunk_portable(uint16_t high, const void *stored, size_t length, void *out, size_t capacity);

#endif
