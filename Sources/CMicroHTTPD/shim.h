#include <stdarg.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

// libmicrohttpd's start and info calls are C variadic functions, which Swift
// cannot call; these fixed-argument wrappers are the only call sites.

#include <string.h>

/// The unescape callback topicstore installs: it leaves `%XX` escapes in the URL and its
/// arguments as they came (returns the length unchanged), so the server decodes them itself
/// and can tell a `%2F` inside a path segment from a `/` between segments, and a `%00` from
/// the end of the string (libmicrohttpd's own decoding hands both over as C strings).
static inline size_t topicstore_mhd_keep_escapes(void *cls, struct MHD_Connection *connection, char *s) {
    (void)cls; (void)connection;
    return strlen(s);
}

/// Starts a daemon listening on `addr` with the options the HTTPServer target uses.
/// `thread_pool_size` > 1 selects the internal epoll thread pool (not allowed with
/// MHD_USE_THREAD_PER_CONNECTION).
///
/// MHD_OPTION_LISTENING_ADDRESS_REUSE is left at its default: SO_REUSEADDR only, so a
/// restarted server can bind while old connections sit in TIME_WAIT. Setting it to 1
/// adds SO_REUSEPORT, which lets a second server bind the same port while the first
/// still listens and the kernel then splits the connections between the two stores.
/// On failure NULL is returned with errno set (EADDRINUSE when the port is taken).
static inline struct MHD_Daemon *topicstore_mhd_start(unsigned int flags, const struct sockaddr *addr,
                                                      MHD_AccessHandlerCallback handler, void *handler_cls,
                                                      MHD_RequestCompletedCallback completed, void *completed_cls,
                                                      unsigned int connection_limit, unsigned int timeout_seconds,
                                                      size_t memory_limit, unsigned int thread_pool_size) {
    if (thread_pool_size > 1) {
        return MHD_start_daemon(flags, 0, NULL, NULL, handler, handler_cls,
                                MHD_OPTION_SOCK_ADDR, addr,
                                MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
                                MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                                MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds,
                                MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory_limit,
                                MHD_OPTION_THREAD_POOL_SIZE, thread_pool_size,
                                MHD_OPTION_UNESCAPE_CALLBACK, topicstore_mhd_keep_escapes, NULL,
                                MHD_OPTION_END);
    }
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_SOCK_ADDR, addr,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
                            MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory_limit,
                            MHD_OPTION_UNESCAPE_CALLBACK, topicstore_mhd_keep_escapes, NULL,
                            MHD_OPTION_END);
}

/// The port the daemon's listen socket is bound to (the real one when 0 was asked), or 0.
static inline uint16_t topicstore_mhd_bound_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}

/// Open connections of the daemon.
static inline unsigned int topicstore_mhd_connection_count(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return info ? info->num_connections : 0;
}

/// The peer address of a connection (NULL when unknown).
static inline const struct sockaddr *topicstore_mhd_client_address(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return info ? info->client_addr : NULL;
}
