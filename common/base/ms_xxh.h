/* ms_xxh: XXH3 through libxxhash's run-time dispatch (its AVX2 or AVX-512 code where the CPU has it). */
#ifndef MS_XXH_H
#define MS_XXH_H

/* Including this instead of <xxhash.h> makes XXH3_64bits, XXH3_128bits and their seeded and
 * streaming forms call libxxhash's *_dispatch functions, which pick the widest vector code the
 * CPU runs. The hashes are the same on every path (XXH3 is defined bit for bit); only the speed
 * differs: the library's plain entry points run its SSE2 code, 17-19 GB/s on a Zen 5 core,
 * where the dispatched AVX-512 code hashes a 40 KB trunk-pack block at 77 GB/s and a 17.5 MB
 * expert at 48 (tests/bench: the block checks of every streamed trunk chunk and expert read). */
#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xxh_x86dispatch.h>
#endif

#endif
