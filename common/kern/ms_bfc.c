/* ms_bfc: BF16 block codec: histogram-chosen k-bit high-byte codes in bit planes, scalar and AVX2 decoders. */
#include <pthread.h>
#include <string.h>
#include "ms_xxh.h" /* XXH3, dispatched */

#include "ms_bfc.h"
#include "ms_cpu.h"
#include "ms_err.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define MS_BFC_X86 1
#include <immintrin.h>
#define MS_AVX2 __attribute__((target("avx2")))
#else
#define MS_BFC_X86 0
#endif

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static size_t groups(size_t n) { return (n + 31) / 32; }

static size_t layout_size(size_t n, int k, size_t esc)
{
    if (k == 8) return MS_BFC_HDR + 2 * n;
    return MS_BFC_HDR + 4 * (size_t)k * groups(n) + esc + n;
}

/* The largest layout: forced k = 4 with every value escaped (k = -1 never exceeds raw). */
size_t ms_bfc_bound(size_t n) { return layout_size(n, 4, n); }

int ms_bfc_block_k(const uint8_t *src, size_t size) { return size < MS_BFC_HDR ? -1 : src[12]; }

size_t ms_bfc_encode(const uint16_t *src, size_t n, int k, uint8_t *dst)
{
    MS_ASSERT(n <= MS_BFC_MAX_VALUES);
    uint64_t cnt[256] = {0};
    for (size_t i = 0; i < n; i++) cnt[src[i] >> 8]++;
    /* High bytes by count, descending; ties by value (deterministic). */
    uint8_t ord[256];
    for (int i = 0; i < 256; i++) ord[i] = (uint8_t)i;
    for (int i = 1; i < 256; i++) { /* insertion sort: 256 entries */
        uint8_t v = ord[i];
        int j = i;
        while (j > 0 && cnt[ord[j - 1]] < cnt[v]) {
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = v;
    }
    size_t cover[17] = {0}; /* cover[t] = values among the t most frequent */
    for (int t = 1; t <= 16; t++) cover[t] = cover[t - 1] + (size_t)cnt[ord[t - 1]];
    if (k < 0) {
        k = 8;
        size_t best = layout_size(n, 8, 0);
        for (int kk = 0; kk <= 4; kk++) {
            int ntab = kk ? (1 << kk) - 1 : 1;
            if (kk == 0 && cover[1] != n) continue;
            size_t s = layout_size(n, kk, n - cover[ntab]);
            if (s < best) best = s, k = kk;
        }
    }
    MS_ASSERT(k == 8 || (k >= 0 && k <= 4));
    MS_ASSERT(k != 0 || cover[1] == n);
    int ntab = k == 0 ? 1 : k == 8 ? 0 : (1 << k) - 1;
    uint8_t esc_code = (uint8_t)(k >= 1 && k <= 4 ? (1 << k) - 1 : 0);
    int16_t code[256];
    for (int i = 0; i < 256; i++) code[i] = (int16_t)esc_code;
    memset(dst, 0, MS_BFC_HDR);
    for (int t = 0; t < ntab; t++) {
        code[ord[t]] = (int16_t)t;
        dst[24 + t] = ord[t];
    }
    put32(dst + 8, (uint32_t)n);
    dst[12] = (uint8_t)k;
    uint8_t *p = dst + MS_BFC_HDR;
    size_t esc = 0;
    if (k == 8) {
        for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(src[i] >> 8);
        p += n;
    } else if (k > 0) {
        size_t G = groups(n);
        uint8_t *planes = p, *escs = p + 4 * (size_t)k * G;
        for (size_t g = 0; g < G; g++) {
            uint32_t pl[4] = {0};
            for (size_t i = 0; i < 32 && g * 32 + i < n; i++) {
                uint8_t hb = (uint8_t)(src[g * 32 + i] >> 8);
                unsigned c = (unsigned)code[hb];
                if (c == esc_code) escs[esc++] = hb;
                for (int b = 0; b < k; b++) pl[b] |= (uint32_t)((c >> b) & 1u) << i;
            }
            for (int b = 0; b < k; b++) put32(planes + 4 * ((size_t)k * g + (size_t)b), pl[b]);
        }
        p = escs + esc;
    }
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)src[i];
    p += n;
    put32(dst + 16, (uint32_t)esc);
    size_t size = (size_t)(p - dst);
    MS_ASSERT(size == layout_size(n, k, esc));
    uint64_t h = XXH3_64bits(dst + 8, size - 8);
    memcpy(dst, &h, 8);
    return size;
}

/* Validate the header against size and n; on success the layout's parts. */
typedef struct {
    int k;
    size_t esc;
    const uint8_t *tab, *planes, *escs, *hi, *lo;
} parts;

/* sum: 0 skips the checksum (a block ms_bfc_verify accepted when it was loaded). */
static int check(const uint8_t *src, size_t size, size_t n, int sum, parts *p)
{
    if (size < MS_BFC_HDR || get32(src + 8) != n) return MS_BFC_BAD_FORM;
    uint64_t h;
    memcpy(&h, src, 8);
    if (sum && XXH3_64bits(src + 8, size - 8) != h) return MS_BFC_BAD_SUM;
    p->k = src[12];
    p->esc = get32(src + 16);
    if (!(p->k == 8 || p->k <= 4)) return MS_BFC_BAD_FORM;
    if ((p->k == 0 || p->k == 8) && p->esc) return MS_BFC_BAD_FORM;
    if (p->esc > n || layout_size(n, p->k, p->esc) != size) return MS_BFC_BAD_FORM;
    p->tab = src + 24;
    const uint8_t *q = src + MS_BFC_HDR;
    p->planes = p->hi = NULL;
    if (p->k == 8) {
        p->hi = q;
        q += n;
    } else {
        p->planes = q;
        q += 4 * (size_t)p->k * groups(n);
    }
    p->escs = q;
    q += p->esc;
    p->lo = q;
    return 0;
}

/* Groups [g0, G) of a k = 1..4 block, scalar; *e counts escapes used. */
static int planes_scalar(const parts *p, size_t n, size_t g0, size_t *e, uint16_t *dst)
{
    int k = p->k;
    unsigned esc_code = (1u << k) - 1;
    for (size_t g = g0; g * 32 < n; g++) {
        uint32_t pl[4];
        for (int b = 0; b < k; b++) pl[b] = get32(p->planes + 4 * ((size_t)k * g + (size_t)b));
        for (size_t i = 0; i < 32 && g * 32 + i < n; i++) {
            unsigned c = 0;
            for (int b = 0; b < k; b++) c |= ((pl[b] >> i) & 1u) << b;
            uint8_t hb;
            if (c == esc_code) {
                if (*e >= p->esc) return MS_BFC_BAD_FORM;
                hb = p->escs[(*e)++];
            } else {
                hb = p->tab[c];
            }
            dst[g * 32 + i] = (uint16_t)((unsigned)hb << 8 | p->lo[g * 32 + i]);
        }
    }
    return 0;
}

static int decode_scalar(const parts *p, uint16_t *dst, size_t n)
{
    if (p->k == 8) {
        for (size_t i = 0; i < n; i++) dst[i] = (uint16_t)((unsigned)p->hi[i] << 8 | p->lo[i]);
        return 0;
    }
    if (p->k == 0) {
        for (size_t i = 0; i < n; i++) dst[i] = (uint16_t)((unsigned)p->tab[0] << 8 | p->lo[i]);
        return 0;
    }
    size_t e = 0;
    int rc = planes_scalar(p, n, 0, &e, dst);
    if (rc == 0 && e != p->esc) rc = MS_BFC_BAD_FORM;
    return rc;
}

#if MS_BFC_X86
/* rank8[b]: byte j = the rank of bit j among the set bits of b when set, else 0x80 (pshufb: 0). */
static uint64_t rank8[256];
static pthread_once_t rank_once = PTHREAD_ONCE_INIT;
static void rank_init(void)
{
    for (int b = 0; b < 256; b++) {
        uint64_t v = 0;
        int r = 0;
        for (int j = 0; j < 8; j++) v |= (uint64_t)((b >> j) & 1 ? r++ : 0x80) << (8 * j);
        rank8[b] = v;
    }
}

/* Interleave 32 low and 32 high bytes into 32 BF16 values at dst. The halves are stored as they
 * are (16-byte stores) rather than put in order by vperm2i128, which is slow on Zen 1. */
MS_AVX2 static inline void put_pairs(__m256i lo, __m256i hi, uint16_t *dst)
{
    __m256i a = _mm256_unpacklo_epi8(lo, hi); /* values 0-7 | 16-23 */
    __m256i b = _mm256_unpackhi_epi8(lo, hi); /* values 8-15 | 24-31 */
    _mm_storeu_si128((__m128i *)dst, _mm256_castsi256_si128(a));
    _mm_storeu_si128((__m128i *)(dst + 8), _mm256_castsi256_si128(b));
    _mm_storeu_si128((__m128i *)(dst + 16), _mm256_extracti128_si256(a, 1));
    _mm_storeu_si128((__m128i *)(dst + 24), _mm256_extracti128_si256(b, 1));
}

enum { MS_BFC_PF = 1024 }; /* bytes of low bytes ahead; the planes and escapes in proportion */

/* The three streams of a block fetched ahead of a group of 32 values (AVX2 and AVX-512): from
 * memory the decode otherwise waits on each line. As addresses: near the end they point past
 * the block, which a prefetch may, a pointer not. */
static inline void pf_streams(const parts *p, size_t lo_at, const uint8_t *pl, int k, size_t e)
{
    _mm_prefetch((const char *)((uintptr_t)p->lo + lo_at + MS_BFC_PF), _MM_HINT_T0);
    _mm_prefetch((const char *)((uintptr_t)pl + 4 * (size_t)k * MS_BFC_PF / 32), _MM_HINT_T0);
    _mm_prefetch((const char *)((uintptr_t)p->escs + e + MS_BFC_PF), _MM_HINT_T0);
}

MS_AVX2 static int decode_avx2(const parts *p, uint16_t *dst, size_t n, int pf)
{
    size_t full = n / 32, e = 0;
    int k = p->k;
    if (k == 0 || k == 8) {
        __m256i c = _mm256_set1_epi8((char)p->tab[0]);
        for (size_t g = 0; g < full; g++) {
            if (pf && !(g & 1)) { /* once a line, as pf_streams */
                _mm_prefetch((const char *)((uintptr_t)p->lo + 32 * g + MS_BFC_PF), _MM_HINT_T0);
                if (k == 8) _mm_prefetch((const char *)((uintptr_t)p->hi + 32 * g + MS_BFC_PF), _MM_HINT_T0);
            }
            __m256i lo = _mm256_loadu_si256((const __m256i *)(p->lo + 32 * g));
            __m256i hi = k == 8 ? _mm256_loadu_si256((const __m256i *)(p->hi + 32 * g)) : c;
            put_pairs(lo, hi, dst + 32 * g);
        }
        for (size_t i = 32 * full; i < n; i++)
            dst[i] = (uint16_t)((unsigned)(k == 8 ? p->hi[i] : p->tab[0]) << 8 | p->lo[i]);
        return 0;
    }
    __m128i t = _mm_loadu_si128((const __m128i *)p->tab);
    __m256i tab = _mm256_broadcastsi128_si256(t);
    /* byte i of the group takes byte i / 8 of the broadcast plane word, then its bit i % 8 */
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                            3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i escv = _mm256_set1_epi8((char)((1 << k) - 1));
    const uint8_t *pl = p->planes;
    size_t avail = p->esc + n; /* escaped bytes, then the low bytes: readable from escs */
    pthread_once(&rank_once, rank_init);
    for (size_t g = 0; g < full; g++, pl += 4 * k) {
        if (pf && !(g & 1)) pf_streams(p, 32 * g, pl, k, e); /* once a line of low bytes */
        __m256i idx = _mm256_setzero_si256();
        for (int b = 0; b < k; b++) {
            __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)get32(pl + 4 * b)), spread);
            v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
            idx = _mm256_or_si256(idx, _mm256_and_si256(v, _mm256_set1_epi8((char)(1 << b))));
        }
        __m256i hi = _mm256_shuffle_epi8(tab, idx);
        __m256i isesc = _mm256_cmpeq_epi8(idx, escv);
        uint32_t m = (uint32_t)_mm256_movemask_epi8(isesc);
        int c = __builtin_popcount(m);
        if (c <= 16 && e + 16 <= avail) {
            /* Branch-free: each escape position's rank among the group's escapes (per mask byte
             * from the table, plus the escapes of the bytes before it) picks its escaped byte. */
            uint64_t b0 = 0, b1 = (uint64_t)__builtin_popcount(m & 0xffu), b2 = (uint64_t)__builtin_popcount(m & 0xffffu),
                     b3 = (uint64_t)__builtin_popcount(m & 0xffffffu);
            const uint64_t ones = 0x0101010101010101ull;
            __m256i ctl = _mm256_setr_epi64x((long long)(rank8[m & 0xff] + b0 * ones),
                                             (long long)(rank8[(m >> 8) & 0xff] + b1 * ones),
                                             (long long)(rank8[(m >> 16) & 0xff] + b2 * ones),
                                             (long long)(rank8[m >> 24] + b3 * ones));
            __m256i ev = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p->escs + e)));
            hi = _mm256_blendv_epi8(hi, _mm256_shuffle_epi8(ev, ctl), isesc);
            e += (size_t)c;
            put_pairs(_mm256_loadu_si256((const __m256i *)(p->lo + 32 * g)), hi, dst + 32 * g);
            continue;
        }
        put_pairs(_mm256_loadu_si256((const __m256i *)(p->lo + 32 * g)), hi, dst + 32 * g);
        if (e + (size_t)c > p->esc) return MS_BFC_BAD_FORM;
        uint8_t *o = (uint8_t *)(dst + 32 * g) + 1; /* little-endian: the high byte */
        while (m) {
            o[2 * __builtin_ctz(m)] = p->escs[e++];
            m &= m - 1;
        }
    }
    int rc = planes_scalar(p, n, full, &e, dst); /* the last partial group */
    if (rc == 0 && e != p->esc) rc = MS_BFC_BAD_FORM;
    return rc;
}

/* ---- AVX-512 with VBMI and VBMI2 (ms_cpu_has_vbmi2): 64 values, two groups, a step ----
 * A plane word is already a mask: plane b of two groups side by side is a 64-bit mask, and one
 * masked byte add sets bit b of the codes where it is set (AVX2 spreads each plane over bytes
 * with four instructions). The escapes are where every plane is set (code 2^k - 1), the AND of
 * the plane words; vpexpandb puts the next escaped bytes in those places, in value order, where
 * AVX2 builds a shuffle from rank tables. vpermt2b interleaves low and high bytes in order. */
#define MS_AVX512BFC __attribute__((target("avx512f,avx512bw,avx512vbmi,avx512vbmi2,avx2,popcnt")))

/* The steps of a k = 1..4 block, k a constant in each copy (the plane loop unrolled); returns
 * the escapes used. */
MS_AVX512BFC static inline __attribute__((always_inline)) size_t steps_512(const parts *p, uint16_t *dst, size_t n,
                                                                             size_t steps, const int k, __m512i i0,
                                                                             __m512i i1)
{
    const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p->tab));
    const size_t avail = p->esc + n; /* escaped bytes, then the low bytes: readable from escs */
    size_t e = 0;
    for (size_t s = 0; s < steps; s++) {
        const uint8_t *pl = p->planes + 8 * (size_t)k * s; /* group 2s's k words, then group 2s + 1's */
        __m512i idx = _mm512_setzero_si512();
        uint64_t esc = ~0ull;
        _Pragma("GCC unroll 4") for (int b = 0; b < k; b++)
        {
            uint64_t m = (uint64_t)get32(pl + 4 * b) | (uint64_t)get32(pl + 4 * (k + b)) << 32;
            idx = _mm512_mask_add_epi8(idx, _cvtu64_mask64(m), idx, _mm512_set1_epi8((char)(1 << b))); /* bit b: add is or */
            esc &= m;
        }
        __m512i hi = _mm512_shuffle_epi8(tab, idx);
        if (esc) {
            /* e <= 64 s (a value takes at most one escape) and n >= 64 (s + 1), so the 64 bytes
             * from escs + e are inside the block, however many escapes it claims */
            MS_ASSERT(e + 64 <= avail);
            hi = _mm512_mask_expand_epi8(hi, _cvtu64_mask64(esc), _mm512_loadu_si512(p->escs + e));
            e += (size_t)__builtin_popcountll(esc); /* past p->esc: caught by the count check at the end */
        }
        /* A block decoded without its checksum comes straight from memory (XXH3 had read it in
         * order before): fetch its three streams ahead, or the decode waits on each line. */
        pf_streams(p, 64 * s, pl, k, e);
        __m512i lo = _mm512_loadu_si512(p->lo + 64 * s);
        _mm512_storeu_si512(dst + 64 * s, _mm512_permutex2var_epi8(lo, i0, hi));
        _mm512_storeu_si512(dst + 64 * s + 32, _mm512_permutex2var_epi8(lo, i1, hi));
    }
    return e;
}

MS_AVX512BFC static int decode_512(const parts *p, uint16_t *dst, size_t n)
{
    const size_t steps = n / 64;
    const int k = p->k;
    /* byte j of i0: low byte j / 2 (j even) or high byte j / 2 (j odd): values 0-31; i1: 32-63 */
    const __m512i i0 = _mm512_set_epi8(95, 31, 94, 30, 93, 29, 92, 28, 91, 27, 90, 26, 89, 25, 88, 24, 87, 23, 86, 22, 85, 21, 84,
                             20, 83, 19, 82, 18, 81, 17, 80, 16, 79, 15, 78, 14, 77, 13, 76, 12, 75, 11, 74, 10, 73, 9, 72,
                             8, 71, 7, 70, 6, 69, 5, 68, 4, 67, 3, 66, 2, 65, 1, 64, 0),
        i1 = _mm512_add_epi8(i0, _mm512_set1_epi8(32));
    if (k == 0 || k == 8) {
        const __m512i c = _mm512_set1_epi8((char)p->tab[0]);
        for (size_t s = 0; s < steps; s++) {
            __m512i lo = _mm512_loadu_si512(p->lo + 64 * s);
            __m512i hi = k == 8 ? _mm512_loadu_si512(p->hi + 64 * s) : c;
            _mm512_storeu_si512(dst + 64 * s, _mm512_permutex2var_epi8(lo, i0, hi));
            _mm512_storeu_si512(dst + 64 * s + 32, _mm512_permutex2var_epi8(lo, i1, hi));
        }
        for (size_t i = 64 * steps; i < n; i++)
            dst[i] = (uint16_t)((unsigned)(k == 8 ? p->hi[i] : p->tab[0]) << 8 | p->lo[i]);
        return 0;
    }
    size_t e = k == 1   ? steps_512(p, dst, n, steps, 1, i0, i1)
               : k == 2 ? steps_512(p, dst, n, steps, 2, i0, i1)
               : k == 3 ? steps_512(p, dst, n, steps, 3, i0, i1)
                        : steps_512(p, dst, n, steps, 4, i0, i1);
    int rc = planes_scalar(p, n, 2 * steps, &e, dst); /* the last group or two */
    if (rc == 0 && e != p->esc) rc = MS_BFC_BAD_FORM;
    return rc;
}
#endif

int ms_bfc_decode_scalar(const uint8_t *src, size_t size, uint16_t *dst, size_t n)
{
    parts p;
    int rc = check(src, size, n, 1, &p);
    return rc ? rc : decode_scalar(&p, dst, n);
}

static int decode(const uint8_t *src, size_t size, uint16_t *dst, size_t n, int sum)
{
    parts p;
    int rc = check(src, size, n, sum, &p);
    if (rc) return rc;
#if MS_BFC_X86
    int level = ms_cpu_level();
    if (level == MS_SIMD_AVX512 && ms_cpu_has_vbmi2()) return decode_512(&p, dst, n);
    /* A checked block was just read in order by its XXH3: in cache, nothing to fetch ahead. */
    if (level >= MS_SIMD_AVX2) return decode_avx2(&p, dst, n, !sum);
#endif
    return decode_scalar(&p, dst, n);
}

int ms_bfc_decode(const uint8_t *src, size_t size, uint16_t *dst, size_t n) { return decode(src, size, dst, n, 1); }

int ms_bfc_decode_verified(const uint8_t *src, size_t size, uint16_t *dst, size_t n) { return decode(src, size, dst, n, 0); }

int ms_bfc_verify(const uint8_t *src, size_t size, size_t n)
{
    parts p;
    return check(src, size, n, 1, &p);
}
