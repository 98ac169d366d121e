#ifndef TOPICSTORE_CCURL_SHIM_H
#define TOPICSTORE_CCURL_SHIM_H
// libcurl (OpenSSL flavour, HTTP/2 through nghttp2) from Debian's libcurl4-openssl-dev.
// curl_easy_setopt and friends are variadic, which Swift cannot call: these
// typed wrappers are the one call site of each.
#include <curl/curl.h>

typedef size_t (*topicstore_curl_data_cb)(char *data, size_t size, size_t count, void *user);

static inline CURLcode topicstore_easy_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode topicstore_easy_ptr(CURL *h, CURLoption o, const void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode topicstore_easy_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode topicstore_easy_callback(CURL *h, CURLoption o, topicstore_curl_data_cb cb) { return curl_easy_setopt(h, o, cb); }
static inline CURLcode topicstore_easy_info_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode topicstore_easy_info_ptr(CURL *h, CURLINFO i, void **v) { return curl_easy_getinfo(h, i, v); }
static inline CURLMcode topicstore_multi_long(CURLM *m, CURLMoption o, long v) { return curl_multi_setopt(m, o, v); }
#endif
