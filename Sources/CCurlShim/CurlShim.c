// A minimal blocking HTTP client over libcurl, loaded with dlopen, for S3 requests (bodies of many megabytes
// either way; a download's body can go straight into a file descriptor as it arrives).
//
// URLSession on Linux drives the same libcurl through libdispatch sources: every socket event of an
// 8 MiB upload becomes a dispatch wake-up and re-arm, which cost the client more CPU than the server.
// curl_easy_perform on its own thread sends the body with plain poll()/send(). libcurl is loaded at run
// time (it is already in the process through FoundationNetworking), so no curl headers or -dev package
// are needed to build; the few constants used are libcurl's stable ABI values.

#include "CCurlShim.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef void CURL;
struct curl_slist;
typedef int64_t curl_off_t;

// Option ids: type base (LONG 0, OBJECTPOINT 10000, FUNCTIONPOINT 20000, OFF_T 30000) + number.
enum {
    OPT_WRITEDATA = 10001, OPT_URL = 10002, OPT_READDATA = 10009, OPT_ERRORBUFFER = 10010,
    OPT_WRITEFUNCTION = 20011, OPT_READFUNCTION = 20012, OPT_LOW_SPEED_LIMIT = 19, OPT_LOW_SPEED_TIME = 20,
    OPT_HTTPHEADER = 10023, OPT_HEADERDATA = 10029, OPT_CONNECTTIMEOUT_MS = 156,
    OPT_CUSTOMREQUEST = 10036, OPT_NOPROGRESS = 43, OPT_NOBODY = 44, OPT_UPLOAD = 46, OPT_FOLLOWLOCATION = 52,
    OPT_HTTPGET = 80,
    OPT_HEADERFUNCTION = 20079, OPT_NOSIGNAL = 99, OPT_INFILESIZE_LARGE = 30115,
    OPT_SEEKFUNCTION = 20167, OPT_SEEKDATA = 10168, OPT_PROTOCOLS = 181, OPT_XFERINFODATA = 10057,
    OPT_XFERINFOFUNCTION = 20219, OPT_UPLOAD_BUFFERSIZE = 280,
};
enum { INFO_RESPONSE_CODE = 0x200002 };
enum { PROTO_HTTP = 1, PROTO_HTTPS = 2 };
enum { GLOBAL_ALL = 3 };
enum { ERROR_SIZE = 256 };

static struct {
    int (*global_init)(long);
    CURL *(*easy_init)(void);
    int (*easy_setopt)(CURL *, int, ...);
    int (*easy_perform)(CURL *);
    int (*easy_getinfo)(CURL *, int, ...);
    void (*easy_reset)(CURL *);
    void (*easy_cleanup)(CURL *);
    const char *(*easy_strerror)(int);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
} lib;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int loaded = 0;

static void load(void) {
    void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcurl.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
#define SYM(field, name) do { *(void **)&lib.field = dlsym(h, name); if (!lib.field) return; } while (0)
    SYM(global_init, "curl_global_init");
    SYM(easy_init, "curl_easy_init");
    SYM(easy_setopt, "curl_easy_setopt");
    SYM(easy_perform, "curl_easy_perform");
    SYM(easy_getinfo, "curl_easy_getinfo");
    SYM(easy_reset, "curl_easy_reset");
    SYM(easy_cleanup, "curl_easy_cleanup");
    SYM(easy_strerror, "curl_easy_strerror");
    SYM(slist_append, "curl_slist_append");
    SYM(slist_free_all, "curl_slist_free_all");
#undef SYM
    if (lib.global_init(GLOBAL_ALL) != 0) return;
    loaded = 1;
}

int rtsync_curl_available(void) {
    pthread_once(&load_once, load);
    return loaded;
}

// Idle easy handles, each keeping its connection to the server alive for the next request.
#define POOL_SIZE 32
static CURL *pool[POOL_SIZE];
static int pool_count = 0;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static CURL *take_handle(void) {
    CURL *h = NULL;
    pthread_mutex_lock(&pool_lock);
    if (pool_count > 0) h = pool[--pool_count];
    pthread_mutex_unlock(&pool_lock);
    return h ? h : lib.easy_init();
}

static void give_back(CURL *h) {
    lib.easy_reset(h);
    pthread_mutex_lock(&pool_lock);
    if (pool_count < POOL_SIZE) { pool[pool_count++] = h; h = NULL; }
    pthread_mutex_unlock(&pool_lock);
    if (h) lib.easy_cleanup(h);
}

typedef struct { const char *data; size_t length; size_t offset; } source_t;
typedef struct { char *data; size_t length; size_t capacity; int failed; } sink_t;

static size_t read_body(char *buffer, size_t size, size_t count, void *user) {
    source_t *s = user;
    size_t n = size * count, left = s->length - s->offset;
    if (n > left) n = left;
    if (n == 0) return 0;
    memcpy(buffer, s->data + s->offset, n);
    s->offset += n;
    return n;
}

static int seek_body(void *user, curl_off_t offset, int origin) {
    source_t *s = user;
    if (origin != 0 /* SEEK_SET */ || offset < 0 || (size_t)offset > s->length) return 1;  // CURL_SEEKFUNC_FAIL
    s->offset = (size_t)offset;
    return 0;
}

static int append(sink_t *k, const char *bytes, size_t n) {
    if (k->length + n > k->capacity) {
        size_t capacity = k->capacity ? k->capacity : 1024;
        while (capacity < k->length + n) capacity *= 2;
        char *grown = realloc(k->data, capacity);
        if (!grown) { k->failed = 1; return 0; }
        k->data = grown;
        k->capacity = capacity;
    }
    memcpy(k->data + k->length, bytes, n);
    k->length += n;
    return 1;
}

// Where a response body goes: memory, or (a 2xx answer's, when a file descriptor is given) a file.
typedef struct {
    sink_t memory;
    int fd;
    long long offset;
    long long streamed;
    int status;         // of the response being received, from its status line
    int write_errno;    // non-zero after a failed pwrite (the transfer is then aborted)
    rtsync_curl_written written;  // sees what reached the file (may be NULL)
    void *written_context;
} body_t;

static size_t write_body(char *bytes, size_t size, size_t count, void *user) {
    body_t *b = user;
    size_t n = size * count;
    if (b->fd >= 0 && b->status >= 200 && b->status < 300) {
        size_t done = 0;
        while (done < n) {
            ssize_t w = pwrite(b->fd, bytes + done, n - done, (off_t)(b->offset + b->streamed + (long long)done));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) { b->write_errno = w < 0 ? errno : EIO; return 0; }  // 0 makes libcurl abort (CURLE_WRITE_ERROR)
            done += (size_t)w;
        }
        if (b->written) b->written(b->written_context, bytes, n, b->offset + b->streamed);
        b->streamed += (long long)n;
        return n;
    }
    return append(&b->memory, bytes, n) ? n : 0;
}

typedef struct { sink_t lines; body_t *body; } head_t;

static size_t write_header(char *bytes, size_t size, size_t count, void *user) {
    head_t *h = user;
    sink_t *k = &h->lines;
    size_t n = size * count;
    // Keep only the last response's headers (after a 100 Continue or an interim answer).
    if (n >= 5 && memcmp(bytes, "HTTP/", 5) == 0) {
        k->length = 0;
        // "HTTP/1.1 200 OK": the status decides where this response's body goes.
        int status = 0;
        size_t i = 5;
        while (i < n && bytes[i] != ' ') i++;
        while (i < n && bytes[i] == ' ') i++;
        for (int digits = 0; digits < 3 && i < n && bytes[i] >= '0' && bytes[i] <= '9'; digits++, i++) status = status * 10 + (bytes[i] - '0');
        h->body->status = status;
    }
    return append(k, bytes, n) ? n : 0;
}

static int progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    (void)dltotal; (void)dlnow; (void)ultotal; (void)ulnow;
    volatile int *cancel = user;
    return cancel && *cancel ? 1 : 0;  // non-zero aborts with CURLE_ABORTED_BY_CALLBACK
}

int rtsync_curl_perform(const char *method, const char *url, const char *const *headers, size_t header_count,
                        const void *body, size_t body_length, long idle_timeout_ms, volatile int *cancel,
                        int out_fd, long long out_offset, rtsync_curl_written written, void *written_context,
                        rtsync_curl_result *result) {
    memset(result, 0, sizeof *result);
    if (!rtsync_curl_available()) return -1;
    CURL *h = take_handle();
    if (!h) return -1;
    struct curl_slist *list = NULL;
    for (size_t i = 0; i < header_count; i++) list = lib.slist_append(list, headers[i]);
    // No "Expect: 100-continue" wait before the body.
    list = lib.slist_append(list, "Expect:");
    source_t source = { body, body_length, 0 };
    body_t out = { .fd = out_fd, .offset = out_offset, .written = written, .written_context = written_context };
    head_t head = { .body = &out };
    char error[ERROR_SIZE] = { 0 };

    lib.easy_setopt(h, OPT_URL, url);
    lib.easy_setopt(h, OPT_PROTOCOLS, (long)(PROTO_HTTP | PROTO_HTTPS));
    lib.easy_setopt(h, OPT_FOLLOWLOCATION, 0L);
    lib.easy_setopt(h, OPT_NOSIGNAL, 1L);
    // Like URLSession's timeoutIntervalForRequest: give up after that long without progress (not a limit on the
    // whole transfer, which on a slow uplink may take longer for one part).
    lib.easy_setopt(h, OPT_CONNECTTIMEOUT_MS, idle_timeout_ms);
    lib.easy_setopt(h, OPT_LOW_SPEED_LIMIT, 1L);
    lib.easy_setopt(h, OPT_LOW_SPEED_TIME, idle_timeout_ms < 1000 ? 1L : idle_timeout_ms / 1000);
    lib.easy_setopt(h, OPT_ERRORBUFFER, error);
    lib.easy_setopt(h, OPT_HTTPHEADER, list);
    if (strcmp(method, "GET") == 0 && body_length == 0) {
        lib.easy_setopt(h, OPT_HTTPGET, 1L);
    } else if (strcmp(method, "HEAD") == 0) {
        lib.easy_setopt(h, OPT_NOBODY, 1L);  // a HEAD answer's Content-Length announces no body to read
    } else if (strcmp(method, "DELETE") == 0 && body_length == 0) {
        lib.easy_setopt(h, OPT_CUSTOMREQUEST, method);
    } else {
        lib.easy_setopt(h, OPT_UPLOAD, 1L);
        lib.easy_setopt(h, OPT_CUSTOMREQUEST, method);
        lib.easy_setopt(h, OPT_INFILESIZE_LARGE, (curl_off_t)body_length);
        lib.easy_setopt(h, OPT_READFUNCTION, read_body);
        lib.easy_setopt(h, OPT_READDATA, &source);
        lib.easy_setopt(h, OPT_SEEKFUNCTION, seek_body);
        lib.easy_setopt(h, OPT_SEEKDATA, &source);
        lib.easy_setopt(h, OPT_UPLOAD_BUFFERSIZE, 512L * 1024);
    }
    lib.easy_setopt(h, OPT_WRITEFUNCTION, write_body);
    lib.easy_setopt(h, OPT_WRITEDATA, &out);
    lib.easy_setopt(h, OPT_HEADERFUNCTION, write_header);
    lib.easy_setopt(h, OPT_HEADERDATA, &head);
    lib.easy_setopt(h, OPT_NOPROGRESS, 0L);
    lib.easy_setopt(h, OPT_XFERINFOFUNCTION, progress);
    lib.easy_setopt(h, OPT_XFERINFODATA, (void *)cancel);

    int code = lib.easy_perform(h);
    if (code == 0 && (head.lines.failed || out.memory.failed)) code = 27;  // CURLE_OUT_OF_MEMORY
    long status = 0;
    lib.easy_getinfo(h, INFO_RESPONSE_CODE, &status);
    result->status = status;
    result->curl_code = code;
    if (code != 0) {
        const char *text = error[0] ? error : lib.easy_strerror(code);
        strncpy(result->error, text, sizeof result->error - 1);
    }
    result->headers = head.lines.data;
    result->headers_length = head.lines.length;
    result->body = out.memory.data;
    result->body_length = out.memory.length;
    result->streamed_length = out.streamed;
    result->write_errno = out.write_errno;
    lib.slist_free_all(list);
    if (code == 0) give_back(h); else lib.easy_cleanup(h);  // a failed handle may hold a broken connection
    return 0;
}

void rtsync_curl_result_free(rtsync_curl_result *result) {
    free(result->headers);
    free(result->body);
    result->headers = NULL;
    result->body = NULL;
}
