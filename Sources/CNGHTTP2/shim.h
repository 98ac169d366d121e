#ifndef TOPICSTORE_CNGHTTP2_SHIM_H
#define TOPICSTORE_CNGHTTP2_SHIM_H
// libnghttp2 (HTTP/2 framing, HPACK) from Debian's libnghttp2-dev, over OpenSSL's
// libssl (TLS, ALPN h2) from libssl-dev: the push engine of Sources/Delivery.
// A few OpenSSL calls are macros, which Swift cannot call: these wrappers are
// their one call site.
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netdb.h>
#include <poll.h>
#include <fcntl.h>
#include <unistd.h>

static inline long topicstore_ssl_set_sni(SSL *ssl, const char *host) { return SSL_set_tlsext_host_name(ssl, host); }
static inline long topicstore_ssl_set_mode(SSL *ssl, long mode) { return SSL_set_mode(ssl, mode); }
static inline long topicstore_ssl_ctx_set_min_tls12(SSL_CTX *ctx) { return SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION); }
static inline int topicstore_set_nonblocking(int fd) {
    int flags = fcntl(fd, F_GETFL, 0);
    return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}
/// The frame type and flags of an nghttp2 frame (a C union Swift reads awkwardly).
static inline uint8_t topicstore_frame_type(const nghttp2_frame *f) { return f->hd.type; }
static inline uint8_t topicstore_frame_flags(const nghttp2_frame *f) { return f->hd.flags; }
static inline int32_t topicstore_frame_stream_id(const nghttp2_frame *f) { return f->hd.stream_id; }
static inline uint8_t topicstore_frame_headers_category(const nghttp2_frame *f) { return (uint8_t)f->headers.cat; }
#endif
