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

/// SHA-256 of one buffer into out[0..<32].
static inline void topicstore_sha256(const void *body, size_t count, unsigned char *out) {
    SHA256_CTX ctx;
    SHA256_Init(&ctx);
    SHA256_Update(&ctx, body, count);
    SHA256_Final(out, &ctx);
}
#endif
