// The 6-bit form of an FCM-shaped token (`StoredName`'s `.token64`): a run of
// base64url characters (RFC 4648 §5: A-Z a-z 0-9 - _) with at most one colon,
// which is what Firebase registration tokens look like (`<instance id>:APA91b…`,
// 163 characters). Four characters are three bytes; the colon's place is kept
// beside them by the caller.
#include "CIntrinsics.h"
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#include <tmmintrin.h>

/// Which of 16 bytes lie in `lo...hi` (0xFF each), compared as signed: bytes
/// from 0x80 up are negative and lie in none of the ranges used here.
static inline __m128i topicstore_in_range(__m128i v, char lo, char hi) {
    return _mm_and_si128(_mm_cmpgt_epi8(v, _mm_set1_epi8((char)(lo - 1))), _mm_cmplt_epi8(v, _mm_set1_epi8((char)(hi + 1))));
}
#endif

static const char topicstore_token64_alphabet[64] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// A character's 6-bit value, 64 for a colon, 255 for anything else.
static const unsigned char topicstore_token64_values[256] = {
#define X 255
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,  X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, 62, X, X, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 64, X, X, X, X, X,
    X, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, X, X, X, X, 63,
    X, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,  X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,  X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,  X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,  X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
#undef X
};

long topicstore_token64_colon(const void *text, size_t count) {
    const unsigned char *p = text;
    long colon = (long)count;
    size_t i = 0;
#if defined(__x86_64__)
    // 16 characters a step: each in one of the five ranges, or a colon.
    for (; i + 16 <= count; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
        __m128i ok = _mm_or_si128(_mm_or_si128(topicstore_in_range(v, 'A', 'Z'), topicstore_in_range(v, 'a', 'z')),
                                  _mm_or_si128(topicstore_in_range(v, '0', '9'),
                                               _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('-')),
                                                            _mm_cmpeq_epi8(v, _mm_set1_epi8('_')))));
        unsigned colons = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(':')));
        if (((unsigned)_mm_movemask_epi8(ok) | colons) != 0xFFFF) return -1;
        if (colons != 0) {
            if (colon != (long)count || (colons & (colons - 1)) != 0) return -1;
            colon = (long)(i + (size_t)__builtin_ctz(colons));
        }
    }
#endif
    unsigned char seen = 0;
    for (; i < count; i++) {
        unsigned char v = topicstore_token64_values[p[i]];
        seen |= v;
        if (v == 64) {
            if (colon != (long)count) return -1;
            colon = (long)i;
        }
    }
    return seen == 255 ? -1 : colon;
}

#if defined(__x86_64__)
/// Spells 16 characters from each 12 bytes with SSSE3 while 16 bytes can be
/// loaded (Muła's base64 encoding, with the base64url alphabet): each 32-bit
/// lane gets one 3-byte group, its four 6-bit fields are moved into bytes with
/// two multiplies, and a 16-entry table adds the distance to each character.
/// Returns how many symbols it wrote (a multiple of 16).
__attribute__((target("ssse3")))
static size_t topicstore_spell_token64_ssse3(const unsigned char *b, size_t symbols, unsigned char *o) {
    const __m128i groups = _mm_setr_epi8(1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10);
    const __m128i offsets = _mm_setr_epi8('a' - 26, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52,
                                          '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '-' - 62, '_' - 63,
                                          'A', 0, 0);
    size_t bytes = (6 * symbols + 7) / 8, i = 0;
    while (i + 16 <= symbols && 3 * (i / 4) + 16 <= bytes) {
        __m128i in = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(b + 3 * (i / 4))), groups);
        __m128i high = _mm_mulhi_epu16(_mm_and_si128(in, _mm_set1_epi32(0x0FC0FC00)), _mm_set1_epi32(0x04000040));
        __m128i low = _mm_mullo_epi16(_mm_and_si128(in, _mm_set1_epi32(0x003F03F0)), _mm_set1_epi32(0x01000010));
        __m128i values = _mm_or_si128(high, low);
        // 0 for a-z, 1-10 for digits, 11 and 12 for - and _, 13 for A-Z.
        __m128i index = _mm_subs_epu8(values, _mm_set1_epi8(51));
        index = _mm_or_si128(index, _mm_and_si128(_mm_cmpgt_epi8(_mm_set1_epi8(26), values), _mm_set1_epi8(13)));
        _mm_storeu_si128((__m128i *)(o + i), _mm_add_epi8(values, _mm_shuffle_epi8(offsets, index)));
        i += 16;
    }
    return i;
}

/// Whether the CPU has SSSE3, asked once (threads that race to ask store the same answer).
static int topicstore_has_ssse3(void) {
    static int known = -1;
    int answer = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (answer < 0) {
        __builtin_cpu_init();
        answer = __builtin_cpu_supports("ssse3") ? 1 : 0;
        __atomic_store_n(&known, answer, __ATOMIC_RELAXED);
    }
    return answer;
}
#endif

/// Packs `n` characters (no colon among them) four to three bytes, the first in the high bits.
static void topicstore_pack_token64_scalar(const unsigned char *p, size_t n, unsigned char *o) {
    const unsigned char *v = topicstore_token64_values;
    for (; n >= 4; n -= 4, p += 4, o += 3) {
        uint32_t w = (uint32_t)v[p[0]] << 18 | (uint32_t)v[p[1]] << 12 | (uint32_t)v[p[2]] << 6 | v[p[3]];
        o[0] = (unsigned char)(w >> 16);
        o[1] = (unsigned char)(w >> 8);
        o[2] = (unsigned char)w;
    }
    if (n > 0) {  // 1 to 3 characters in 1 to 3 bytes, the unused low bits zero
        uint32_t w = 0;
        for (size_t k = 0; k < n; k++) w |= (uint32_t)v[p[k]] << (18 - 6 * k);
        for (size_t k = 0; k < (6 * n + 7) / 8; k++) o[k] = (unsigned char)(w >> (16 - 8 * k));
    }
}

#if defined(__x86_64__)
/// Packs 16 characters into 12 bytes a step with SSSE3 while the 16-byte store
/// stays inside the `bytes` of the packed name (Muła's base64 decoding, the
/// characters known to be base64url): each character's value from its range,
/// pairs then quads joined by two multiply-adds, the quads' three bytes shuffled
/// into place. Returns how many characters it packed (a multiple of 16).
__attribute__((target("ssse3")))
static size_t topicstore_pack_token64_ssse3(const unsigned char *p, size_t n, unsigned char *o, size_t bytes) {
    const __m128i order = _mm_setr_epi8(2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1);
    size_t i = 0;
    while (i + 16 <= n && 3 * (i / 4) + 16 <= bytes) {
        __m128i c = _mm_loadu_si128((const __m128i *)(p + i));
        __m128i shift = _mm_and_si128(topicstore_in_range(c, 'A', 'Z'), _mm_set1_epi8(-65));
        shift = _mm_or_si128(shift, _mm_and_si128(topicstore_in_range(c, 'a', 'z'), _mm_set1_epi8(-71)));
        shift = _mm_or_si128(shift, _mm_and_si128(topicstore_in_range(c, '0', '9'), _mm_set1_epi8(4)));
        shift = _mm_or_si128(shift, _mm_and_si128(_mm_cmpeq_epi8(c, _mm_set1_epi8('-')), _mm_set1_epi8(62 - '-')));
        shift = _mm_or_si128(shift, _mm_and_si128(_mm_cmpeq_epi8(c, _mm_set1_epi8('_')), _mm_set1_epi8(63 - '_')));
        __m128i values = _mm_add_epi8(c, shift);
        __m128i pairs = _mm_maddubs_epi16(values, _mm_set1_epi32(0x01400140));   // a << 6 | b
        __m128i quads = _mm_madd_epi16(pairs, _mm_set1_epi32(0x00011000));       // ab << 12 | cd
        _mm_storeu_si128((__m128i *)(o + 3 * (i / 4)), _mm_shuffle_epi8(quads, order));
        i += 16;
    }
    return i;
}
#endif

void topicstore_pack_token64(const void *text, size_t count, size_t colon, void *out) {
    const unsigned char *p = text;
    unsigned char *o = out;
    unsigned char joined[256];
    size_t n = count;
    if (colon < count) {  // the characters on both sides of the colon, joined
        memcpy(joined, p, colon);
        memcpy(joined + colon, p + colon + 1, count - colon - 1);
        p = joined;
        n = count - 1;
    }
    size_t i = 0;
#if defined(__x86_64__)
    if (n >= 16 && topicstore_has_ssse3()) i = topicstore_pack_token64_ssse3(p, n, o, (6 * n + 7) / 8);
#endif
    topicstore_pack_token64_scalar(p + i, n - i, o + 3 * (i / 4));
}

void topicstore_spell_token64(const void *packed, size_t symbols, size_t colon, void *out) {
    const unsigned char *b = packed;
    unsigned char *o = out;
    size_t i = 0;
#if defined(__x86_64__)
    if (symbols >= 16 && topicstore_has_ssse3()) {
        i = topicstore_spell_token64_ssse3(b, symbols, o);
        b += 3 * (i / 4);
    }
#endif
    // Three bytes are four characters.
    for (; i + 4 <= symbols; i += 4, b += 3) {
        uint32_t v = (uint32_t)b[0] << 16 | (uint32_t)b[1] << 8 | b[2];
        o[i] = (unsigned char)topicstore_token64_alphabet[v >> 18];
        o[i + 1] = (unsigned char)topicstore_token64_alphabet[(v >> 12) & 63];
        o[i + 2] = (unsigned char)topicstore_token64_alphabet[(v >> 6) & 63];
        o[i + 3] = (unsigned char)topicstore_token64_alphabet[v & 63];
    }
    if (i < symbols) {
        size_t left = symbols - i;  // 1 to 3 symbols in 1 to 3 bytes
        uint32_t v = (uint32_t)b[0] << 16 | (left > 1 ? (uint32_t)b[1] << 8 : 0) | (left > 2 ? b[2] : 0);
        for (size_t k = 0; k < left; k++) o[i + k] = (unsigned char)topicstore_token64_alphabet[(v >> (18 - 6 * k)) & 63];
    }
    if (colon <= symbols) {
        if (colon < symbols) memmove(o + colon + 1, o + colon, symbols - colon);
        o[colon] = ':';
    }
}
