#ifndef TOPICSTORE_CCRYPTO_SHIM_H
#define TOPICSTORE_CCRYPTO_SHIM_H
// libcrypto (OpenSSL 3) from Debian's libssl-dev, shared by every target that
// needs a digest, a MAC or random bytes. The SHA256_* functions are
// "deprecated" in 3.0 in favour of EVP, but they are the fastest path for many
// short messages (no per-call fetch or context allocation) and still use the
// SHA-NI / AVX2 assembly.
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/pem.h>
#include <openssl/bio.h>
#include <openssl/ecdsa.h>
#include <openssl/bn.h>
#include <stddef.h>

/// SHA-256(prefix[0..<32] ‖ body[0..<count]) into out[0..<32]: one link of the log's hash chain.
static inline void topicstore_sha256_chain(const void *prefix32, const void *body, size_t count, unsigned char *out) {
    SHA256_CTX ctx;
    SHA256_Init(&ctx);
    SHA256_Update(&ctx, prefix32, 32);
    SHA256_Update(&ctx, body, count);
    SHA256_Final(out, &ctx);
}

/// SHA-256(prefix[0..<32] ‖ head[0..<headCount] ‖ body[0..<count]) into out[0..<32]: a link
/// over a record whose first bytes are held apart from the rest.
static inline void topicstore_sha256_chain2(const void *prefix32, const void *head, size_t headCount,
                                            const void *body, size_t count, unsigned char *out) {
    SHA256_CTX ctx;
    SHA256_Init(&ctx);
    SHA256_Update(&ctx, prefix32, 32);
    SHA256_Update(&ctx, head, headCount);
    SHA256_Update(&ctx, body, count);
    SHA256_Final(out, &ctx);
}

/// SHA-256 of msg[0..<count] into out[0..<32], padded in place: msg has room
/// for `topicstore_sha256_padded_size(count)` bytes, and the bytes past `count`
/// are overwritten. The blocks go straight to the block function, without
/// Update's copies into the context and Final's padding and cleansing (a
/// third of hashing a chain link of ~260 bytes, callgrind).
static inline size_t topicstore_sha256_padded_size(size_t count) { return (count + 9 + 63) / 64 * 64; }

static inline void topicstore_sha256_padded(unsigned char *msg, size_t count, unsigned char *out) {
    size_t total = topicstore_sha256_padded_size(count);
    msg[count] = 0x80;
    for (size_t i = count + 1; i < total - 8; i++) msg[i] = 0;
    unsigned long long bits = (unsigned long long)count * 8;
    for (int i = 0; i < 8; i++) msg[total - 1 - i] = (unsigned char)(bits >> (8 * i));
    SHA256_CTX ctx;
    SHA256_Init(&ctx);
    for (size_t at = 0; at < total; at += 64) SHA256_Transform(&ctx, msg + at);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (unsigned char)(ctx.h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(ctx.h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(ctx.h[i] >> 8);
        out[4 * i + 3] = (unsigned char)ctx.h[i];
    }
}

/// SHA-256 of one buffer into out[0..<32].
static inline void topicstore_sha256(const void *body, size_t count, unsigned char *out) {
    SHA256_CTX ctx;
    SHA256_Init(&ctx);
    SHA256_Update(&ctx, body, count);
    SHA256_Final(out, &ctx);
}
#endif
