#ifndef RTSYNC_CCURLSHIM_H
#define RTSYNC_CCURLSHIM_H

#include <stddef.h>

/// The answer to one request sent with rtsync_curl_perform.
typedef struct rtsync_curl_result {
    /// The HTTP status of the final response (0 when none arrived).
    long status;
    /// libcurl's CURLcode: 0 when the exchange completed (whatever the status).
    int curl_code;
    /// libcurl's error text when curl_code != 0.
    char error[256];
    /// Header lines of the final response ("Name: value\r\n" each), malloc'd; free with rtsync_curl_result_free.
    char *headers;
    size_t headers_length;
    /// The response body, malloc'd.
    char *body;
    size_t body_length;
    /// Bytes of a 2xx body written to `out_fd`; those are not in `body`.
    long long streamed_length;
    /// Non-zero (the errno) when writing to `out_fd` failed; the transfer was aborted.
    int write_errno;
} rtsync_curl_result;

/// Loads libcurl (libcurl.so.4) at run time; returns 1 when it is usable. Thread-safe; the first call decides.
int rtsync_curl_available(void);

/// Called with each run of body bytes written to `out_fd`, after they were written, and the file offset of the first.
typedef void (*rtsync_curl_written)(void *context, const void *bytes, size_t length, long long offset);

/// Sends `method url` with `headers` ("Name: value" strings) and `body` (sent as it is, with a Content-Length; GET
/// and HEAD send none, HEAD reads none), blocking the calling thread until the answer or an error. Easy handles (and
/// their keep-alive connections) are pooled across calls. The transfer fails after `idle_timeout_ms` without
/// progress (connecting, or fewer than one byte per second moving either way). Setting `*cancel` to non-zero from
/// another thread aborts the transfer. With `out_fd` >= 0 the body of a 2xx answer is written with pwrite into
/// `out_fd` from `out_offset` on, as it arrives, instead of into `result->body` (other answers, error documents,
/// still go to `result->body`); `written` (when not NULL) sees every run of those bytes as it reaches the file, so
/// the caller can hash a download as it arrives instead of reading the file back.
/// Returns 0 when the request was attempted (see result->curl_code), -1 when libcurl is unavailable.
int rtsync_curl_perform(const char *method, const char *url, const char *const *headers, size_t header_count,
                        const void *body, size_t body_length, long idle_timeout_ms, volatile int *cancel,
                        int out_fd, long long out_offset, rtsync_curl_written written, void *written_context,
                        rtsync_curl_result *result);

/// Frees the buffers of a result.
void rtsync_curl_result_free(rtsync_curl_result *result);

#endif
