/* ms_xxh: XXH3 through libxxhash's run-time dispatch (its AVX2 or AVX-512 code where the CPU has it). */
#ifndef MS_XXH_H
#define MS_XXH_H

/* Including this instead of <xxhash.h> makes XXH3_64bits, XXH3_128bits and their seeded and
 * streaming forms call libxxhash's *_dispatch functions, which pick the widest vector code the
 * CPU runs. The hashes are the same on every path (XXH3 is defined bit for bit); only the speed
 * differs: on a Zen 5 core the library's plain entry points (its SSE2 code) hash a trunk-pack
 * block in cache at 15-17 GB/s, the dispatched AVX-512 code at 72-76 (`moestream pack-trunk
 * --bench` shows both). Every streamed trunk chunk and every expert read is hashed. */
#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xxh_x86dispatch.h>
#endif

#endif
