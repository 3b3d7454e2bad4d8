#ifndef RTSYNC_CCHECKSUM_H
#define RTSYNC_CCHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/// CRC-32 (the ISO-HDLC polynomial of zlib, gzip and S3's x-amz-checksum-crc32) of `length` bytes, continuing from
/// `crc` (0 to start). Uses the system zlib's crc32 when it can be loaded, otherwise rtsync_crc32_portable.
uint32_t rtsync_crc32(uint32_t crc, const void *data, size_t length);

/// The same CRC-32 computed without zlib (slice-by-8 tables), for platforms without it and for tests.
uint32_t rtsync_crc32_portable(uint32_t crc, const void *data, size_t length);

#endif
