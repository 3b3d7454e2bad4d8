// CRC-32 for S3's x-amz-checksum-crc32 part checksums.
//
// zlib's crc32 is several times faster than a table loop and is present wherever libcurl or Foundation is, so it
// is loaded at run time (no zlib headers or -dev package needed to build, as for libcurl in CCurlShim). Without it
// a slice-by-8 table implementation gives the same values.

#include "CChecksum.h"

#include <dlfcn.h>
#include <pthread.h>

typedef unsigned long (*zlib_crc32_fn)(unsigned long crc, const unsigned char *buf, unsigned int len);

static zlib_crc32_fn zlib_crc32 = NULL;
// table[k][b]: the CRC register after byte b followed by k zero bytes (reflected polynomial 0xEDB88320).
static uint32_t table[8][256];
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

static void setup(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int bit = 0; bit < 8; bit++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        table[0][b] = c;
    }
    for (int k = 1; k < 8; k++) {
        for (uint32_t b = 0; b < 256; b++) table[k][b] = (table[k - 1][b] >> 8) ^ table[0][table[k - 1][b] & 0xffu];
    }
#if defined(__APPLE__)
    static const char *const names[] = { "/usr/lib/libz.1.dylib", "libz.dylib", NULL };
#else
    static const char *const names[] = { "libz.so.1", "libz.so", NULL };
#endif
    for (int i = 0; names[i] != NULL; i++) {
        void *handle = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (handle == NULL) continue;
        *(void **)&zlib_crc32 = dlsym(handle, "crc32");
        if (zlib_crc32 != NULL) break;
        dlclose(handle);
    }
}

uint32_t rtsync_crc32_portable(uint32_t crc, const void *data, size_t length) {
    pthread_once(&setup_once, setup);
    const uint8_t *p = data;
    uint32_t c = ~crc;
    while (length >= 8) {
        // Bytes are combined explicitly, so the loop does not depend on the machine's byte order or alignment.
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        c = table[7][lo & 0xffu] ^ table[6][(lo >> 8) & 0xffu] ^ table[5][(lo >> 16) & 0xffu] ^ table[4][lo >> 24]
          ^ table[3][hi & 0xffu] ^ table[2][(hi >> 8) & 0xffu] ^ table[1][(hi >> 16) & 0xffu] ^ table[0][hi >> 24];
        p += 8;
        length -= 8;
    }
    while (length-- > 0) c = (c >> 8) ^ table[0][(c ^ *p++) & 0xffu];
    return ~c;
}

uint32_t rtsync_crc32(uint32_t crc, const void *data, size_t length) {
    pthread_once(&setup_once, setup);
    if (zlib_crc32 == NULL) return rtsync_crc32_portable(crc, data, length);
    const unsigned char *p = data;
    unsigned long c = crc;
    while (length > 0) {
        // zlib takes an unsigned int length.
        unsigned int n = length > (1u << 30) ? (1u << 30) : (unsigned int)length;
        c = zlib_crc32(c, p, n);
        p += n;
        length -= n;
    }
    return (uint32_t)c;
}
