// A fast fake APNs + FCM push endpoint for scripts/bench-send: HTTP/2 over TLS
// (ALPN h2) with libnghttp2 and OpenSSL, one epoll loop per thread, the threads
// accepting on one port (SO_REUSEPORT). It answers by the device token's prefix
// as Tests/Fakes/fake_push.py does for the outcomes a benchmark needs:
//   APNs  POST /3/device/<token>          gone… 410 {"reason":"Unregistered","timestamp":ms}
//                                         bad…  400 {"reason":"BadDeviceToken"}
//                                         else  200 with an apns-id
//   FCM   POST /v1/projects/<p>/messages:send, token from {"message":{"token":"…"
//                                         unreg…   404 NOT_FOUND / UNREGISTERED
//                                         invalid… 400 INVALID_ARGUMENT on message.token
//                                         else     200 {"name":"projects/fake/messages/<n>"}
// A request without an authorization header gets 403 (APNs) / 401 (FCM). Unlike the
// Python fake it does not verify JWT signatures or access tokens, and has no OAuth2
// token endpoint: the correctness tests use the Python fake; this one measures speed.
//
//   gcc -O2 -pthread -o fast_push fast_push.c -lnghttp2 -lssl -lcrypto
//   fast_push --cert server.pem --key server.key [--port 0] [--threads 2]
// prints "listening <port>" once every thread accepts; on SIGTERM/SIGINT prints the answers by status to stderr.
#define _GNU_SOURCE
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define OUT_CAP (256 * 1024)
#define READ_CAP (64 * 1024)

static SSL_CTX *ctx;
static int port;
static atomic_long by_status[600];

typedef struct {
    int fd;
    SSL *ssl;
    nghttp2_session *session;
    int handshaken;
    unsigned char *out;
    size_t out_start, out_end;
    int want_write;
    int epfd;
} conn_t;

typedef struct {
    int apns, fcm, authorized;
    char token[96];
    size_t token_len;
    char body_head[96];   // the first bytes of the request body (the FCM token)
    size_t body_len;
    char response[512];
    size_t response_len, response_off;
} stream_t;

static long long now_ms(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static int starts(const char *s, size_t n, const char *prefix) {
    size_t p = strlen(prefix);
    return n >= p && memcmp(s, prefix, p) == 0;
}

static ssize_t read_response(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                             uint32_t *flags, nghttp2_data_source *source, void *user) {
    (void)session; (void)stream_id; (void)user;
    stream_t *s = source->ptr;
    size_t n = s->response_len - s->response_off;
    if (n > length) n = length;
    memcpy(buf, s->response + s->response_off, n);
    s->response_off += n;
    if (s->response_off >= s->response_len) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

#define NV(n, v, vl) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl), NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE}

static void respond(nghttp2_session *session, int32_t stream_id, stream_t *s) {
    static _Thread_local unsigned long counter;
    int status = 200;
    const char *token = s->token;
    size_t tl = s->token_len;
    if (s->fcm) {
        static const char head[] = "{\"message\":{\"token\":\"";
        token = NULL; tl = 0;
        if (s->body_len > sizeof(head) - 1 && memcmp(s->body_head, head, sizeof(head) - 1) == 0) {
            token = s->body_head + sizeof(head) - 1;
            const char *end = memchr(token, '"', s->body_len - (sizeof(head) - 1));
            tl = end ? (size_t)(end - token) : s->body_len - (sizeof(head) - 1);
        }
    }
    if (!s->apns && !s->fcm) {
        status = 404;
        s->response_len = (size_t)snprintf(s->response, sizeof s->response, "{\"reason\":\"NotFound\"}");
    } else if (!s->authorized) {
        status = s->apns ? 403 : 401;
        s->response_len = (size_t)snprintf(s->response, sizeof s->response, s->apns ? "{\"reason\":\"InvalidProviderToken\"}"
            : "{\"error\":{\"code\":401,\"message\":\"Request had invalid authentication credentials.\",\"status\":\"UNAUTHENTICATED\"}}");
    } else if (s->apns && starts(token, tl, "gone")) {
        status = 410;
        s->response_len = (size_t)snprintf(s->response, sizeof s->response, "{\"reason\":\"Unregistered\",\"timestamp\":%lld}", now_ms());
    } else if (s->apns && starts(token, tl, "bad")) {
        status = 400;
        s->response_len = (size_t)snprintf(s->response, sizeof s->response, "{\"reason\":\"BadDeviceToken\"}");
    } else if (s->fcm && (token == NULL || starts(token, tl, "unreg"))) {
        status = 404;
        s->response_len = (size_t)snprintf(s->response, sizeof s->response,
            "{\"error\":{\"code\":404,\"message\":\"Requested entity was not found.\",\"status\":\"NOT_FOUND\",\"details\":"
            "[{\"@type\":\"type.googleapis.com/google.firebase.fcm.v1.FcmError\",\"errorCode\":\"UNREGISTERED\"}]}}");
    } else if (s->fcm && starts(token, tl, "invalid")) {
        status = 400;
        s->response_len = (size_t)snprintf(s->response, sizeof s->response,
            "{\"error\":{\"code\":400,\"message\":\"The registration token is not a valid FCM registration token\",\"status\":\"INVALID_ARGUMENT\","
            "\"details\":[{\"@type\":\"type.googleapis.com/google.firebase.fcm.v1.FcmError\",\"errorCode\":\"INVALID_ARGUMENT\"},"
            "{\"@type\":\"type.googleapis.com/google.rpc.BadRequest\",\"fieldViolations\":[{\"field\":\"message.token\",\"description\":\"Invalid registration token\"}]}]}}");
    } else if (s->fcm) {
        s->response_len = (size_t)snprintf(s->response, sizeof s->response, "{\"name\":\"projects/fake/messages/%lu\"}", ++counter);
    } else {
        s->response_len = 0;
    }
    atomic_fetch_add_explicit(&by_status[status], 1, memory_order_relaxed);
    char status_text[4], length_text[8], apns_id[40];
    snprintf(status_text, sizeof status_text, "%d", status);
    int ll = snprintf(length_text, sizeof length_text, "%zu", s->response_len);
    nghttp2_nv nva[3] = {NV(":status", status_text, 3), NV("content-length", length_text, (size_t)ll), NV("apns-id", apns_id, 0)};
    size_t n = 2;
    if (s->apns && status == 200) {
        nva[2].valuelen = (size_t)snprintf(apns_id, sizeof apns_id, "00000000-0000-0000-0000-%012lu", ++counter);
        n = 3;
    }
    // nghttp2 copies the header values at submit unless told otherwise: these locals are copied.
    for (size_t i = 0; i < n; i++) nva[i].flags = NGHTTP2_NV_FLAG_NO_COPY_NAME;
    s->response_off = 0;
    nghttp2_data_provider prd = {.source.ptr = s, .read_callback = read_response};
    nghttp2_submit_response(session, stream_id, nva, n, s->response_len ? &prd : NULL);
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user) {
    (void)user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    stream_t *s = calloc(1, sizeof *s);
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, s);
    return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user) {
    (void)flags; (void)user;
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    stream_t *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (!s) return 0;
    if (namelen == 5 && memcmp(name, ":path", 5) == 0) {
        if (starts((const char *)value, valuelen, "/3/device/")) {
            s->apns = 1;
            size_t n = valuelen - 10;
            if (n > sizeof s->token) n = sizeof s->token;
            memcpy(s->token, value + 10, n);
            s->token_len = n;
        } else if (starts((const char *)value, valuelen, "/v1/projects/") && valuelen > 14
                   && memcmp(value + valuelen - 14, "/messages:send", 14) == 0) {
            s->fcm = 1;
        }
    } else if (namelen == 13 && memcmp(name, "authorization", 13) == 0 && valuelen > 7) {
        s->authorized = 1;
    }
    return 0;
}

static int on_data(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data, size_t len, void *user) {
    (void)flags; (void)user;
    stream_t *s = nghttp2_session_get_stream_user_data(session, stream_id);
    if (!s) return 0;
    size_t room = sizeof s->body_head - s->body_len;
    if (len > room) len = room;
    memcpy(s->body_head + s->body_len, data, len);
    s->body_len += len;
    return 0;
}

static int on_frame(nghttp2_session *session, const nghttp2_frame *frame, void *user) {
    (void)user;
    if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        stream_t *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (s) respond(session, frame->hd.stream_id, s);
    }
    return 0;
}

static int on_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code, void *user) {
    (void)error_code; (void)user;
    free(nghttp2_session_get_stream_user_data(session, stream_id));
    nghttp2_session_set_stream_user_data(session, stream_id, NULL);
    return 0;
}

static nghttp2_session_callbacks *callbacks;

static void drop(conn_t *c) {
    epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->session) nghttp2_session_del(c->session);
    SSL_free(c->ssl);
    close(c->fd);
    free(c->out);
    free(c);
}

static void arm(conn_t *c, int want_write) {
    if (c->want_write == want_write) return;
    c->want_write = want_write;
    struct epoll_event ev = {.events = EPOLLIN | (want_write ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(c->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

// Returns 0 to keep the connection, -1 to drop it.
static int flush_out(conn_t *c) {
    for (;;) {
        while (c->out_start < c->out_end) {
            ERR_clear_error();
            int w = SSL_write(c->ssl, c->out + c->out_start, (int)(c->out_end - c->out_start));
            if (w <= 0) {
                int e = SSL_get_error(c->ssl, w);
                if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) { arm(c, 1); return 0; }
                return -1;
            }
            c->out_start += (size_t)w;
        }
        c->out_start = c->out_end = 0;
        while (c->out_end < OUT_CAP - 32 * 1024) {
            const uint8_t *chunk;
            ssize_t n = nghttp2_session_mem_send(c->session, &chunk);
            if (n < 0) return -1;
            if (n == 0) break;
            memcpy(c->out + c->out_end, chunk, (size_t)n);
            c->out_end += (size_t)n;
        }
        if (c->out_end == 0) break;
    }
    arm(c, 0);
    if (!nghttp2_session_want_read(c->session) && !nghttp2_session_want_write(c->session)) return -1;
    return 0;
}

static int start_session(conn_t *c) {
    const unsigned char *proto; unsigned int len;
    SSL_get0_alpn_selected(c->ssl, &proto, &len);
    if (len != 2 || memcmp(proto, "h2", 2) != 0) return -1;
    nghttp2_session_server_new(&c->session, callbacks, c);
    nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1000}, {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
    nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, settings, 2);
    nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, 1 << 24);
    return 0;
}

static int on_readable(conn_t *c, unsigned char *buf) {
    if (!c->handshaken) {
        ERR_clear_error();
        int r = SSL_accept(c->ssl);
        if (r != 1) {
            int e = SSL_get_error(c->ssl, r);
            if (e == SSL_ERROR_WANT_READ) { arm(c, 0); return 0; }
            if (e == SSL_ERROR_WANT_WRITE) { arm(c, 1); return 0; }
            return -1;
        }
        c->handshaken = 1;
        if (start_session(c) != 0) return -1;
    }
    for (;;) {
        ERR_clear_error();
        int r = SSL_read(c->ssl, buf, READ_CAP);
        if (r <= 0) {
            int e = SSL_get_error(c->ssl, r);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) break;
            return -1;
        }
        if (nghttp2_session_mem_recv(c->session, buf, (size_t)r) < 0) return -1;
    }
    return flush_out(c);
}

static int listen_socket(int p) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 1024) != 0) { perror("fast_push: bind/listen"); exit(1); }
    return fd;
}

static void *worker(void *arg) {
    int lfd = (int)(intptr_t)arg;
    int epfd = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev);
    unsigned char *buf = malloc(READ_CAP);
    struct epoll_event events[64];
    for (;;) {
        int n = epoll_wait(epfd, events, 64, -1);
        for (int i = 0; i < n; i++) {
            if (events[i].data.ptr == NULL) {
                int fd;
                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    int one = 1;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conn_t *c = calloc(1, sizeof *c);
                    c->fd = fd;
                    c->epfd = epfd;
                    c->out = malloc(OUT_CAP);
                    c->ssl = SSL_new(ctx);
                    SSL_set_fd(c->ssl, fd);
                    SSL_set_mode(c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
                    SSL_set_accept_state(c->ssl);
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &cev);
                }
                continue;
            }
            conn_t *c = events[i].data.ptr;
            int rc = 0;
            if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) rc = on_readable(c, buf);
            else if (events[i].events & EPOLLOUT) rc = c->handshaken ? flush_out(c) : on_readable(c, buf);
            if (rc != 0) drop(c);
        }
    }
    return NULL;
}

static int select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in, unsigned int inlen, void *arg) {
    (void)ssl; (void)arg;
    return nghttp2_select_next_protocol((unsigned char **)out, outlen, in, inlen) == 1 ? SSL_TLSEXT_ERR_OK : SSL_TLSEXT_ERR_NOACK;
}

static void report(int sig) {
    char line[4096];
    int n = snprintf(line, sizeof line, "fast_push: answered");
    for (int s = 0; s < 600; s++) {
        long v = atomic_load(&by_status[s]);
        if (v) n += snprintf(line + n, sizeof line - (size_t)n, " %d:%ld", s, v);
    }
    n += snprintf(line + n, sizeof line - (size_t)n, "\n");
    write(2, line, (size_t)n);
    signal(sig, SIG_DFL);
    raise(sig);
}

int main(int argc, char **argv) {
    const char *cert = NULL, *key = NULL;
    int threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--cert")) cert = argv[i + 1];
        else if (!strcmp(argv[i], "--key")) key = argv[i + 1];
        else if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else { fprintf(stderr, "fast_push: unknown option %s\n", argv[i]); return 2; }
    }
    if (!cert || !key || threads < 1) { fprintf(stderr, "usage: fast_push --cert F --key F [--port P] [--threads N]\n"); return 2; }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, report);
    signal(SIGINT, report);
    ctx = SSL_CTX_new(TLS_server_method());
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 || SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        ERR_print_errors_fp(stderr);
        return 1;
    }
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_alpn_select_cb(ctx, select_alpn, NULL);
    nghttp2_session_callbacks_new(&callbacks);
    nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_close);
    // Every listener is bound before the port is announced: no connection is refused.
    int *fds = calloc((size_t)threads, sizeof *fds);
    for (int t = 0; t < threads; t++) {
        fds[t] = listen_socket(port);
        if (port == 0) {
            struct sockaddr_in a; socklen_t l = sizeof a;
            getsockname(fds[t], (struct sockaddr *)&a, &l);
            port = ntohs(a.sin_port);
        }
    }
    for (int t = 0; t < threads; t++) {
        pthread_t th;
        pthread_create(&th, NULL, worker, (void *)(intptr_t)fds[t]);
        pthread_detach(th);
    }
    printf("listening %d\n", port);
    fflush(stdout);
    for (;;) pause();
}
