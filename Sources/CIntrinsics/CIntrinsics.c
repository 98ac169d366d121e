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
