// The 6-bit form of an FCM-shaped token (`StoredName`'s `.token64`): a run of
// base64url characters (RFC 4648 §5: A-Z a-z 0-9 - _) with at most one colon,
// which is what Firebase registration tokens look like (`<instance id>:APA91b…`,
// 163 characters). Four characters are three bytes; the colon's place is kept
// beside them by the caller.
#include "CIntrinsics.h"
#include <string.h>

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
    unsigned char seen = 0;
    for (size_t i = 0; i < count; i++) {
        unsigned char v = topicstore_token64_values[p[i]];
        seen |= v;
        if (v == 64) {
            if (colon != (long)count) return -1;
            colon = (long)i;
        }
    }
    return seen == 255 ? -1 : colon;
}

void topicstore_pack_token64(const void *text, size_t count, size_t colon, void *out) {
    const unsigned char *p = text;
    unsigned char *o = out;
    uint32_t bits = 0;
    unsigned held = 0;
    for (size_t i = 0; i < count; i++) {
        if (i == colon) continue;
        bits = bits << 6 | topicstore_token64_values[p[i]];
        held += 6;
        if (held >= 8) {
            held -= 8;
            *o++ = (unsigned char)(bits >> held);
        }
    }
    if (held > 0) *o = (unsigned char)(bits << (8 - held));
}

void topicstore_spell_token64(const void *packed, size_t symbols, size_t colon, void *out) {
    const unsigned char *b = packed;
    unsigned char *o = out;
    size_t i = 0;
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
