/* fuzz_st: libFuzzer harness for one safetensors file (header length, JSON header, offsets) through ms_st_open_file. */
#include "fuzz_util.h"
#include "ms_st.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    const char *path = fuzz_path(0, "model.safetensors");
    fuzz_write(path, data, len);
    ms_st *st = ms_st_open_file(path);
    if (!st) {
        fuzz_refused(ms_err_msg());
        FUZZ_CHECK(ms_err_msg()[0] != 0); /* a refusal always says why */
        return 0;
    }
    /* Accepted: every tensor lies inside the data section, is as large as its shape says and
     * is found by name; its first and last bytes are bytes of the input. */
    FUZZ_CHECK(len >= 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | data[i];
    FUZZ_CHECK(hlen <= len - 8);
    uint64_t base = 8 + hlen;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < ms_st_count(st); i++) {
        const ms_st_tensor *t = ms_st_at(st, i);
        FUZZ_CHECK(t->file == 0);
        FUZZ_CHECK(t->offset >= base && t->offset <= len && t->nbytes <= len - t->offset);
        FUZZ_CHECK(t->nbytes == (uint64_t)t->numel * ms_dtype_size(t->dtype));
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= MS_ST_MAX_DIMS);
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
        FUZZ_CHECK(numel == t->numel);
        FUZZ_CHECK(ms_st_find(st, t->name) == t);
        if (t->nbytes) sink ^= data[t->offset] ^ data[t->offset + t->nbytes - 1];
    }
    (void)sink;
    /* Sorted by offset, the tensors tile the data section exactly, and their bytes read back
     * (without a mapping) as the input's. */
    uint64_t at = base;
    for (size_t i = 0; i < ms_st_count(st); i++) {
        const ms_st_tensor *t = ms_st_at(st, i);
        FUZZ_CHECK(t->offset == at);
        at += t->nbytes;
        if (t->nbytes) {
            uint8_t b;
            FUZZ_CHECK(ms_st_read(st, t, t->nbytes - 1, &b, 1) == 0 && b == data[t->offset + t->nbytes - 1]);
        }
    }
    FUZZ_CHECK(at == len);
    ms_st_close(st);
    return 0;
}
