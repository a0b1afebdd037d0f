/* fuzz_st_index: libFuzzer harness for model.safetensors.index.json beside two fixed shards, through ms_st_open_dir. */
#include "fuzz_util.h"
#include "ms_st.h"

/* Two small shards written once: shard 1 holds a and b, shard 2 holds c. */
static void write_shards(void)
{
    static int done;
    if (done) return;
    done = 1;
    float v[4] = {1, 2, 3, 4};
    int64_t sh[1] = {4};
    const char *names[3] = {"a", "b", "c"};
    for (int s = 0; s < 2; s++) {
        ms_st_writer *w = ms_st_writer_new();
        for (int k = s ? 2 : 0; k < (s ? 3 : 2); k++) ms_st_writer_add_copy(w, names[k], MS_DT_F32, 1, sh, v);
        const char *p = fuzz_path(1, s ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors");
        if (ms_st_writer_write(w, p) != 0) {
            fprintf(stderr, "fuzz_st_index: %s\n", ms_err_msg());
            abort();
        }
        ms_st_writer_free(w);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    write_shards();
    fuzz_write(fuzz_path(0, "model.safetensors.index.json"), data, len);
    ms_st *st = ms_st_open_dir(fuzz_dir());
    if (!st) {
        fuzz_refused(ms_err_msg());
        FUZZ_CHECK(ms_err_msg()[0] != 0);
        return 0;
    }
    /* Accepted: the index named exactly the tensors of the shards it named. */
    size_t n = ms_st_count(st);
    FUZZ_CHECK(n >= 1 && n <= 3);
    for (size_t i = 0; i < n; i++) {
        const ms_st_tensor *t = ms_st_at(st, i);
        FUZZ_CHECK(ms_st_find(st, t->name) == t);
        FUZZ_CHECK(t->nbytes == 16);
        float v[4];
        int fd = open(ms_st_file_path(st, t->file), O_RDONLY);
        FUZZ_CHECK(fd >= 0 && pread(fd, v, sizeof v, (off_t)t->offset) == (ssize_t)sizeof v);
        close(fd);
        FUZZ_CHECK(v[3] == 4.0f);
    }
    ms_st_close(st);
    return 0;
}
