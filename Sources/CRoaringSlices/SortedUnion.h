// The union of two sorted sets of 16-bit values (the arrays of roaring
// containers), by whichever walk is fastest for their sizes. Internal to
// CRoaringSlices.
#ifndef TOPICSTORE_SORTEDUNION_H
#define TOPICSTORE_SORTEDUNION_H

#include <stddef.h>
#include <stdint.h>

/// Extra values `topicstore_sorted_union` may write past its result: `out`
/// must have room for `na + nb + kSortedUnionSlack` values.
enum { kSortedUnionSlack = 8 };

/// Writes the union of the ascending, distinct values `a` (`na` of them) and
/// `b` (`nb`) to `out`, ascending and distinct; returns how many. `out` must
/// not overlap either input.
size_t topicstore_sorted_union(const uint16_t *a, size_t na, const uint16_t *b, size_t nb, uint16_t *out);

#endif
