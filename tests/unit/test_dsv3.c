/* test_dsv3: the DeepSeek-V3 / Kimi K2 family against the official reference (fixtures: a small FP8 checkpoint and a released-like one in four shards), pinned and streamed; its synth presets. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_dsv3_model.h"
#include "ms_err.h"
#include "ms_families.h"
#include "ms_mtest.h"
#include "ms_st.h"
#include "ms_test.h"

/* synth's presets: the tiny one runs; the released layouts (sparse, six layers) open and generate at 8 GiB. */
static void check_synth(void)
{
    char cmd[9000], bin[1024];
    snprintf(bin, sizeof bin, "%s", ms_t_bin("moestream"));
    snprintf(cmd, sizeof cmd, "TMPDIR=%s %s demo --family deepseek-v3 -n 4 --quiet > /dev/null 2>&1",
             ms_t_tmpdir("dsv3-demo"), bin);
    T_CHECK(ms_t_run(cmd, NULL) == 0, "demo --family deepseek-v3 writes its tiny checkpoint and runs it");
    static const char *const big[2] = {"deepseek-v3", "kimi-k2"};
    for (int i = 0; i < 2; i++) {
        char d[1024];
        snprintf(d, sizeof d, "%s/m", ms_t_tmpdir(big[i]));
        /* the released widths, 6 of the 61 layers (the whole depth is tests/bench/deepseek.sh's: a
         * token of it takes seconds here and minutes under the sanitizers) */
        snprintf(cmd, sizeof cmd, "%s synth --preset %s --sparse --layers 6 --out %s 2>/dev/null && %s run --model %s "
                 "--ids 1,2,3 -n 2 --ram-budget 8G --json > /dev/null", bin, big[i], d, bin, d);
        T_CHECK(ms_t_run(cmd, NULL) == 0, "synth --preset %s --sparse --layers 6 (the released widths) runs at --ram-budget 8G",
                big[i]);
        /* a chat: Kimi K2's tokenizer renders Kimi's format; DeepSeek's template is refused, saying so */
        char body[1200], *out = NULL, *err = NULL;
        snprintf(body, sizeof body, "%s/chat.json", ms_t_tmpdir("dsv3-chat"));
        FILE *f = fopen(body, "w");
        if (f) fputs("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", f), fclose(f);
        int st = ms_t_runf(&out, &err, "%s tokenize --model %s --chat %s --json", bin, d, body);
        if (i == 1)
            T_CHECK(st == 0 && out && strstr(out, "<|im_user|>user<|im_middle|>Hi<|im_end|><|im_assistant|>assistant<|im_middle|>"),
                    "kimi-k2: a chat renders in Kimi's format (%s)", out ? out : "");
        else
            T_CHECK(st == 5 && err && strstr(err, "DeepSeek-V3 chat template is not rendered"),
                    "deepseek-v3: a chat is refused, naming what is missing (status %d: %s)", st, err ? err : "");
        free(out);
        free(err);
    }
}

int main(void)
{
    ms_log_set_level(0);
    check_synth();
    const char *names[2] = {"tiny-s3", "tiny-released-like"};
    for (int i = 0; i < 2; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "fixtures/deepseek-v3/checkpoints/%s", names[i]);
        const char *p = ms_t_shared(rel);
        if (!p) continue;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", p);
        ms_run_opts o = {.n_threads = 2};
        ms_t_check_reference(dir, names[i], "deepseek-v3", &o, "pinned");
        ms_run_opts ob = {.n_threads = 2, .max_positions = 128};
        ob.ram_budget = ms_t_least_budget(dir, ob, names[i]);
        ob.baseline = 1;
        ms_t_check_reference(dir, names[i], "deepseek-v3", &ob, "least budget, trunk streamed");
    }
    return ms_t_done();
}
