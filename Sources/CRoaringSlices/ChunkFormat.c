// The compact format of a stored posting chunk: written from a CRoaring
// bitmap of one container, and turned back into the portable format for
// readers that decode with CRoaring (see `topicstore_chunk_size` and
// StoredChunk.h for the layout).
#include "CRoaringSlices.h"
#include "StoredChunk.h"

#include <string.h>
#include <roaring/roaring.h>
#include <roaring/containers/containers.h>

/// The one container of `bitmap`, or NULL (with `type` unset) when it holds
/// none or more than one. Copy-on-write is off, so no container is shared.
static const void *only_container(const void *bitmap, uint8_t *type) {
    const roaring_array_t *ra = &((const roaring_bitmap_t *)bitmap)->high_low_container;
    if (ra->size != 1) return NULL;
    const void *container = ra->containers[0];
    *type = ra->typecodes[0];
    if (*type == SHARED_CONTAINER_TYPE_CODE) return NULL;
    return container;
}

int64_t topicstore_chunk_size(const void *bitmap) {
    uint8_t type;
    const void *c = only_container(bitmap, &type);
    if (c == NULL) return -1;
    switch (type) {
    case ARRAY_CONTAINER_TYPE_CODE: return 2 + 2 * (int64_t)((const array_container_t *)c)->cardinality;
    case BITSET_CONTAINER_TYPE_CODE: return 4 + kBitsetBytes;
    case RUN_CONTAINER_TYPE_CODE: return 2 + 4 * (int64_t)((const run_container_t *)c)->n_runs;
    default: return -1;
    }
}

static void store16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)(v & 0xFF);
    p[1] = (unsigned char)(v >> 8);
}

int64_t topicstore_chunk_write(const void *bitmap, void *out, size_t capacity) {
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    return -1;  // containers are copied as they are in memory
#endif
    int64_t size = topicstore_chunk_size(bitmap);
    if (size < 0 || (size_t)size > capacity) return -1;
    uint8_t type;
    const void *c = only_container(bitmap, &type);
    unsigned char *p = out;
    p[1] = 0;
    switch (type) {
    case ARRAY_CONTAINER_TYPE_CODE: {
        const array_container_t *a = c;
        if (a->cardinality == 0) return -1;  // an empty chunk is never stored
        p[0] = kTagArray;
        memcpy(p + 2, a->array, 2 * (size_t)a->cardinality);
        break;
    }
    case BITSET_CONTAINER_TYPE_CODE: {
        const bitset_container_t *b = c;
        int32_t cardinality = b->cardinality;
        if (cardinality == BITSET_UNKNOWN_CARDINALITY) cardinality = bitset_container_compute_cardinality(b);
        if (cardinality <= kMaxArray) return -1;  // not how CRoaring keeps so few: not written as a bitset
        p[0] = kTagBitset;
        store16(p + 2, (uint16_t)(cardinality - 1));
        memcpy(p + 4, b->array, kBitsetBytes);
        break;
    }
    default: {
        const run_container_t *r = c;
        if (r->n_runs == 0) return -1;
        p[0] = kTagRuns;
        memcpy(p + 2, r->runs, 4 * (size_t)r->n_runs);
        break;
    }
    }
    return size;
}

int64_t topicstore_chunk_portable(uint16_t high, const void *stored, size_t length, void *out, size_t capacity) {
    slice_t s;
    const unsigned char *p = stored;
    if (stored == NULL || length < 1 || p[0] > kTagRuns || topicstore_parse_stored(p, length, high, &s) != 0) return -1;
    unsigned char *o = out;
    if (s.type == kRun) {
        // cookie (count - 1 = 0 in its high half), run flags, key, cardinality - 1, the run count, the runs.
        size_t size = 11 + 4 * (size_t)s.count;
        if (size > capacity) return -1;
        uint32_t cardinality = 0;
        for (int32_t i = 0; i < s.count; i++) cardinality += (uint32_t)load16(s.bytes, 2 * i + 1) + 1;
        store16(o, kCookie); store16(o + 2, 0);
        o[4] = 1;
        store16(o + 5, high);
        store16(o + 7, (uint16_t)(cardinality - 1));
        store16(o + 9, (uint16_t)s.count);
        memcpy(o + 11, s.bytes, 4 * (size_t)s.count);
        return (int64_t)size;
    }
    // cookie, container count, key, cardinality - 1, the container's offset, its bytes.
    size_t bytes = s.type == kArray ? 2 * (size_t)s.count : kBitsetBytes;
    if (16 + bytes > capacity) return -1;
    store16(o, kCookieNoRun); store16(o + 2, 0);
    store16(o + 4, 1); store16(o + 6, 0);
    store16(o + 8, high);
    store16(o + 10, (uint16_t)(s.count - 1));
    store16(o + 12, 16); store16(o + 14, 0);
    memcpy(o + 16, s.bytes, bytes);
    return (int64_t)(16 + bytes);
}
