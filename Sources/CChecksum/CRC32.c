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

// CRC-32C and CRC-64/NVME for verifying downloads against S3's x-amz-checksum-crc32c and -crc64nvme. Both are
// reflected CRCs with all-ones initial value and final XOR; slice-by-8 tables built once, like the CRC-32 above.
static uint32_t table32c[8][256];
static uint64_t table64[8][256];
static pthread_once_t setup_more_once = PTHREAD_ONCE_INIT;

static void setup_more(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int bit = 0; bit < 8; bit++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        table32c[0][b] = c;
        uint64_t d = b;
        for (int bit = 0; bit < 8; bit++) d = (d >> 1) ^ (0x9A6C9329AC4BC9B5ull & (0ull - (d & 1ull)));
        table64[0][b] = d;
    }
    for (int k = 1; k < 8; k++) {
        for (uint32_t b = 0; b < 256; b++) {
            table32c[k][b] = (table32c[k - 1][b] >> 8) ^ table32c[0][table32c[k - 1][b] & 0xffu];
            table64[k][b] = (table64[k - 1][b] >> 8) ^ table64[0][table64[k - 1][b] & 0xffu];
        }
    }
}

uint32_t rtsync_crc32c(uint32_t crc, const void *data, size_t length) {
    pthread_once(&setup_more_once, setup_more);
    const uint8_t *p = data;
    uint32_t c = ~crc;
    while (length >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        c = table32c[7][lo & 0xffu] ^ table32c[6][(lo >> 8) & 0xffu] ^ table32c[5][(lo >> 16) & 0xffu] ^ table32c[4][lo >> 24]
          ^ table32c[3][hi & 0xffu] ^ table32c[2][(hi >> 8) & 0xffu] ^ table32c[1][(hi >> 16) & 0xffu] ^ table32c[0][hi >> 24];
        p += 8;
        length -= 8;
    }
    while (length-- > 0) c = (c >> 8) ^ table32c[0][(c ^ *p++) & 0xffu];
    return ~c;
}

uint64_t rtsync_crc64nvme(uint64_t crc, const void *data, size_t length) {
    pthread_once(&setup_more_once, setup_more);
    const uint8_t *p = data;
    uint64_t c = ~crc;
    while (length >= 8) {
        uint64_t word = 0;
        for (int i = 7; i >= 0; i--) word = (word << 8) | p[i];
        c ^= word;
        c = table64[7][c & 0xff] ^ table64[6][(c >> 8) & 0xff] ^ table64[5][(c >> 16) & 0xff] ^ table64[4][(c >> 24) & 0xff]
          ^ table64[3][(c >> 32) & 0xff] ^ table64[2][(c >> 40) & 0xff] ^ table64[1][(c >> 48) & 0xff] ^ table64[0][c >> 56];
        p += 8;
        length -= 8;
    }
    while (length-- > 0) c = (c >> 8) ^ table64[0][(c ^ *p++) & 0xff];
    return ~c;
}
