/* ms_fp8: the E4M3 code table and block-scaled dequantisation. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "ms_err.h"
#include "ms_fp8.h"

static float table[256]; /* every code's value, built once */
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_build(void)
{
    for (int code = 0; code < 256; code++) {
        int e = (code >> 3) & 15, m = code & 7;
        float v = e == 15 && m == 7 ? NAN : e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
        table[code] = code & 0x80 ? -v : v;
    }
}

float ms_fp8_e4m3(uint8_t code)
{
    pthread_once(&table_once, table_build);
    return table[code];
}

void ms_fp8_dequant_rows(const uint8_t *codes, const uint8_t *scales, int64_t cols, int64_t r0, int64_t n, float *out)
{
    MS_ASSERT(r0 >= 0 && n >= 0 && cols >= 0);
    pthread_once(&table_once, table_build);
    const int64_t cb = ms_fp8_blocks(cols);
    for (int64_t i = 0; i < n; i++) {
        const int64_t r = r0 + i;
        const uint8_t *q = codes + r * cols;
        const uint8_t *srow = scales + (size_t)((r / MS_FP8_BLOCK) * cb) * sizeof(float);
        float *o = out + i * cols;
        for (int64_t k = 0; k < cb; k++) {
            float s;
            memcpy(&s, srow + k * sizeof(float), sizeof s); /* the grid may sit unaligned in a file's bytes */
            int64_t c1 = (k + 1) * MS_FP8_BLOCK < cols ? (k + 1) * MS_FP8_BLOCK : cols;
            for (int64_t c = k * MS_FP8_BLOCK; c < c1; c++) o[c] = table[q[c]] * s;
        }
    }
}
