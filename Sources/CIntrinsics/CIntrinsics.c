// CPU instructions Swift cannot express. The CRC-32C here is the one the log's
// records carry (Castagnoli, reflected 0x82F63B78), computed with SSE4.2's
// crc32 instruction: Sources/SubscriptionLog/CRC32C.swift keeps the table
// version for other CPUs, and the tests compare the two.
#include "CIntrinsics.h"
#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>

int topicstore_crc32c_hardware_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
}

__attribute__((target("sse4.2")))
uint32_t topicstore_crc32c_hardware(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *p = bytes;
    uint64_t c = crc;
    while (count >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
        p += 8;
        count -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (count > 0) {
        c32 = _mm_crc32_u8(c32, *p);
        p += 1;
        count -= 1;
    }
    return c32;
}

#else

int topicstore_crc32c_hardware_available(void) { return 0; }

uint32_t topicstore_crc32c_hardware(uint32_t crc, const void *bytes, size_t count) {
    (void)bytes; (void)count;
    return crc;
}

#endif

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

void topicstore_spell_hex(const void *bytes, size_t count, void *out, int upper) {
    const unsigned char *p = bytes;
    unsigned char *o = out;
#if defined(__x86_64__)
    const __m128i low4 = _mm_set1_epi8(0x0F), nine = _mm_set1_epi8(9), zero = _mm_set1_epi8('0');
    const __m128i letters = _mm_set1_epi8(upper ? 'A' - '0' - 10 : 'a' - '0' - 10);
    while (count >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), low4);
        __m128i lo = _mm_and_si128(v, low4);
        // A nibble n becomes '0' + n, plus the distance to the letters where n > 9.
        hi = _mm_add_epi8(_mm_add_epi8(hi, zero), _mm_and_si128(_mm_cmpgt_epi8(hi, nine), letters));
        lo = _mm_add_epi8(_mm_add_epi8(lo, zero), _mm_and_si128(_mm_cmpgt_epi8(lo, nine), letters));
        _mm_storeu_si128((__m128i *)o, _mm_unpacklo_epi8(hi, lo));
        _mm_storeu_si128((__m128i *)(o + 16), _mm_unpackhi_epi8(hi, lo));
        p += 16;
        o += 32;
        count -= 16;
    }
#endif
    const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
    while (count > 0) {
        *o++ = (unsigned char)digits[*p >> 4];
        *o++ = (unsigned char)digits[*p & 15];
        p += 1;
        count -= 1;
    }
}

/// The 32 hex digits of a UUID in its 8-4-4-4-12 form, without the dashes.
static inline void topicstore_uuid_digits(const unsigned char *p, unsigned char digits[32]) {
    memcpy(digits, p, 8);
    memcpy(digits + 8, p + 9, 4);
    memcpy(digits + 12, p + 14, 4);
    memcpy(digits + 16, p + 19, 4);
    memcpy(digits + 20, p + 24, 12);
}

int topicstore_hex_case(const void *text, size_t count) {
    const unsigned char *p = text;
    unsigned lower = 0, upper = 0;
#if defined(__x86_64__)
    // Signed compares: a byte from 0x80 up is negative, so it is in no range.
    const __m128i d0 = _mm_set1_epi8('0' - 1), d1 = _mm_set1_epi8('9' + 1);
    const __m128i l0 = _mm_set1_epi8('a' - 1), l1 = _mm_set1_epi8('f' + 1);
    const __m128i u0 = _mm_set1_epi8('A' - 1), u1 = _mm_set1_epi8('F' + 1);
    while (count >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(v, d0), _mm_cmplt_epi8(v, d1));
        __m128i lo = _mm_and_si128(_mm_cmpgt_epi8(v, l0), _mm_cmplt_epi8(v, l1));
        __m128i up = _mm_and_si128(_mm_cmpgt_epi8(v, u0), _mm_cmplt_epi8(v, u1));
        if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(digit, lo), up)) != 0xFFFF) return 0;
        lower |= (unsigned)_mm_movemask_epi8(lo);
        upper |= (unsigned)_mm_movemask_epi8(up);
        p += 16;
        count -= 16;
    }
#endif
    while (count > 0) {
        unsigned char c = *p;
        if (c >= 'a' && c <= 'f') lower = 1;
        else if (c >= 'A' && c <= 'F') upper = 1;
        else if (c < '0' || c > '9') return 0;
        p += 1;
        count -= 1;
    }
    if (lower && upper) return 0;
    return upper ? 2 : 1;
}

int topicstore_uuid_case(const void *text) {
    const unsigned char *p = text;
    if (p[8] != '-' || p[13] != '-' || p[18] != '-' || p[23] != '-') return 0;
    unsigned char digits[32];
    topicstore_uuid_digits(p, digits);
    return topicstore_hex_case(digits, 32);
}

static inline unsigned char topicstore_nibble(unsigned char c) {
    return c <= '9' ? (unsigned char)(c - '0') : (unsigned char)((c | 0x20) - 'a' + 10);
}

void topicstore_pack_hex(const void *text, size_t count, void *out) {
    const unsigned char *p = text;
    unsigned char *o = out;
#if defined(__x86_64__)
    const __m128i lowercase = _mm_set1_epi8(0x20), zero = _mm_set1_epi8('0'), nine = _mm_set1_epi8('9');
    const __m128i letters = _mm_set1_epi8('a' - '0' - 10), lowByte = _mm_set1_epi16(0x00FF);
    while (count >= 32) {
        __m128i a = _mm_or_si128(_mm_loadu_si128((const __m128i *)p), lowercase);
        __m128i b = _mm_or_si128(_mm_loadu_si128((const __m128i *)(p + 16)), lowercase);
        // Each digit's value: c - '0', less the distance to the letters for a-f.
        a = _mm_sub_epi8(_mm_sub_epi8(a, zero), _mm_and_si128(_mm_cmpgt_epi8(a, nine), letters));
        b = _mm_sub_epi8(_mm_sub_epi8(b, zero), _mm_and_si128(_mm_cmpgt_epi8(b, nine), letters));
        // A 16-bit lane holds a pair, the high digit in its low byte: high << 4 | low.
        a = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(a, lowByte), 4), _mm_srli_epi16(a, 8));
        b = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b, lowByte), 4), _mm_srli_epi16(b, 8));
        _mm_storeu_si128((__m128i *)o, _mm_packus_epi16(a, b));
        p += 32;
        o += 16;
        count -= 32;
    }
#endif
    while (count >= 2) {
        *o++ = (unsigned char)(topicstore_nibble(p[0]) << 4 | topicstore_nibble(p[1]));
        p += 2;
        count -= 2;
    }
}

void topicstore_pack_uuid(const void *text, void *out) {
    const unsigned char *p = text;
    unsigned char digits[32];
    topicstore_uuid_digits(p, digits);
    topicstore_pack_hex(digits, 32, out);
}
