/* test_families: the registry: a checkpoint's config.json picks its family, which opens it behind the one interface. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_families.h"
#include "ms_test.h"

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

int main(void)
{
    ms_log_set_level(0);
    const char *d = ms_t_tmpdir("families");
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/tiny", d);
    const ms_family *k3 = ms_families_find("kimi-k3");
    T_CHECK(k3 && k3 == ms_families_default() && !ms_families_find("nope"), "kimi-k3 is in the table, the default");
    if (!k3) return ms_t_done();
    T_CHECK(k3->synth(dir, "tiny", 0, 0, 3) == 0, "the family writes its synthetic checkpoint: %s", ms_err_msg());
    T_CHECK(k3->synth(dir, "no-such-preset", 0, 0, 3) == -1 && has(ms_err_msg(), "no-such-preset"),
            "an unknown preset is named: %s", ms_err_msg());
    T_CHECK(ms_families_detect(dir) == k3, "its config.json is detected as kimi-k3");
    ms_model_info pk;
    T_CHECK(k3->peek(dir, &pk) == 0 && pk.vocab > 0 && pk.n_layers > 0, "peek reads the config alone");
    ms_run_opts o = {.n_threads = 1};
    ms_model *m = ms_families_open(dir, &o);
    T_CHECK(m != NULL, "opened through the registry: %s", ms_err_msg());
    if (m) {
        const ms_model_info *in = ms_model_get_info(m);
        T_CHECK(!strcmp(in->family, "kimi-k3") && in->vocab == pk.vocab && in->n_layers == pk.n_layers &&
                    in->n_experts == pk.n_experts && in->top_k == pk.top_k && in->first_moe == pk.first_moe &&
                    in->have_xfmt && in->state_bytes > 0 && in->scratch_row_bytes > 0,
                "the info: %s, V %d, %d layers, %d experts (top %d) from layer %d, %llu state bytes", in->family,
                in->vocab, in->n_layers, in->n_experts, in->top_k, in->first_moe, (unsigned long long)in->state_bytes);
        /* one token through the interface */
        float *lg = malloc(sizeof(float) * (size_t)in->vocab);
        ms_seq *s = ms_seq_new(m);
        int32_t id = 1;
        T_CHECK(ms_model_forward(m, s, &id, 1, 0, lg) == 0 && ms_seq_pos(s) == 1, "a forward pass");
        int32_t bad_id = in->vocab;
        T_CHECK(ms_model_forward(m, s, &bad_id, 1, 0, lg) == -1 && ms_err_code() == MS_EXIT_INPUT &&
                    has(ms_err_msg(), "outside the vocabulary"),
                "an id beyond the vocabulary is refused before the family's pass: %s", ms_err_msg());
        ms_seq_free(s);
        free(lg);
        ms_model_free(m);
    }
    /* The trunk matrices a pack would hold: the family's list. */
    ms_st *st = ms_st_open_dir(dir);
    const ms_st_tensor **ts = NULL;
    int n = st ? k3->trunk_matrices(dir, st, &ts) : -1;
    int bf16 = 1;
    for (int i = 0; i < n; i++) bf16 &= ts[i]->dtype == MS_DT_BF16 && ts[i]->ndim == 2;
    T_CHECK(n > 0 && bf16, "%d trunk matrices, each a BF16 matrix", n);
    free(ts);
    ms_st_close(st);
    /* A checkpoint of a family this build does not know: refused, naming it. */
    snprintf(path, sizeof path, "%s/other", d);
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && echo '{\"model_type\": \"llama\"}' > %s/config.json", path, path);
    T_CHECK(system(cmd) == 0, "write a foreign config");
    T_CHECK(!ms_families_open(path, &o) && ms_err_code() == MS_EXIT_MODEL && has(ms_err_msg(), "\"llama\"") &&
                has(ms_err_msg(), "kimi-k3"),
            "another family is refused naming its model_type and the known ones: %s", ms_err_msg());
    snprintf(path, sizeof path, "%s/none", d);
    T_CHECK(!ms_families_detect(path) && ms_err_code() == MS_EXIT_IO, "no config.json: an I/O error naming it (%s)",
            ms_err_msg());
    return ms_t_done();
}
