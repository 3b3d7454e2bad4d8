#ifndef RTSYNC_CCHECKSUM_H
#define RTSYNC_CCHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/// CRC-32 (the ISO-HDLC polynomial of zlib, gzip and S3's x-amz-checksum-crc32) of `length` bytes, continuing from
/// `crc` (0 to start). Uses the system zlib's crc32 when it can be loaded, otherwise rtsync_crc32_portable.
uint32_t rtsync_crc32(uint32_t crc, const void *data, size_t length);

/// The same CRC-32 computed without zlib (slice-by-8 tables), for platforms without it and for tests.
uint32_t rtsync_crc32_portable(uint32_t crc, const void *data, size_t length);

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, as S3's x-amz-checksum-crc32c) of `length` bytes,
/// continuing from `crc` (0 to start).
uint32_t rtsync_crc32c(uint32_t crc, const void *data, size_t length);

/// CRC-64/NVME (polynomial 0xAD93D23594C93659, reflected 0x9A6C9329AC4BC9B5, as S3's
/// x-amz-checksum-crc64nvme) of `length` bytes, continuing from `crc` (0 to start).
uint64_t rtsync_crc64nvme(uint64_t crc, const void *data, size_t length);

#endif
