// Sorted sets of 16-bit values (the arrays of roaring containers): their
// union, by whichever walk is fastest for their sizes, and the check that
// stored values ascend. Internal to CRoaringSlices.
#ifndef TOPICSTORE_SORTEDARRAYS_H
#define TOPICSTORE_SORTEDARRAYS_H

#include <stddef.h>
#include <stdint.h>

/// Extra values `topicstore_sorted_union` may write past its result: `out`
/// must have room for `na + nb + kSortedUnionSlack` values.
enum { kSortedUnionSlack = 8 };

/// Writes the union of the ascending, distinct values `a` (`na` of them) and
/// `b` (`nb`) to `out`, ascending and distinct; returns how many. `out` must
/// not overlap either input.
size_t topicstore_sorted_union(const uint16_t *a, size_t na, const uint16_t *b, size_t nb, uint16_t *out);

/// Whether the `n` little-endian 16-bit values at `bytes` (any alignment)
/// strictly ascend: what a stored array must do before it is counted.
int topicstore_values_ascend(const unsigned char *bytes, size_t n);

#endif
