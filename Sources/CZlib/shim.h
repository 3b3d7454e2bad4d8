#ifndef RTSYNC_CZLIB_SHIM_H
#define RTSYNC_CZLIB_SHIM_H
// The system zlib (zlib1g-dev on Debian/Ubuntu; part of the SDK on Apple platforms): compression of diffs in transit.
#include <zlib.h>

// deflateInit and inflateInit are macros passing the library's version and the stream's size; Swift can't import them.
static inline int rtsync_deflate_init(z_stream *stream, int level) {
    return deflateInit(stream, level);
}
static inline int rtsync_inflate_init(z_stream *stream) {
    return inflateInit(stream);
}
#endif
