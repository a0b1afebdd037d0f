/* test_sengine: serve's engine thread tells where a pass is: during a long prompt's prefill span,
 * ms_sengine_figures (and /metrics rendered from it) gives the layers done of n, the span's rows
 * and a time left that reaches 0 at the last layer; between passes all are 0; the model's own
 * layer observer is called after serve's and put back when the thread ends. */
#include <stdlib.h>
#include <string.h>

#include "ms_engine.h"
#include "ms_err.h"
#include "ms_sengine.h"
#include "ms_synth.h"
#include "ms_test.h"

#define PROMPT 300

static ms_sengine *g_s;
static ms_smetrics *g_m;

/* What the observer saw, one entry per layer callback. */
typedef struct {
    int n, rendered;
    int layer[4096], n_layers[4096];
    int64_t rows[4096];
    ms_smetrics_engine f[4096];
    char first_render[256];
} seen;

static void watch(void *ctx, int layer, int n_layers, int64_t rows)
{
    seen *w = ctx;
    if (w->n >= 4096) return;
    int i = w->n++;
    w->layer[i] = layer;
    w->n_layers[i] = n_layers;
    w->rows[i] = rows;
    ms_sengine_figures(g_s, &w->f[i]);
    if (!w->rendered && layer == 0) {
        /* the /metrics text while the first pass is one layer in */
        size_t len = 0;
        char *t = ms_smetrics_render(g_m, &w->f[i], &len);
        const char *p = t ? strstr(t, "\nmoestream_pass_layers_done ") : NULL;
        const char *q = p ? strchr(p + 1, '\n') : NULL;
        if (p && q) snprintf(w->first_render, sizeof w->first_render, "%.*s", (int)(q - p - 1), p + 1);
        w->rendered = 1;
        free(t);
    }
}

int main(void)
{
    ms_log_set_level(0);
    const char *t = ms_t_tmpdir("sengine");
    char dir[1100];
    snprintf(dir, sizeof dir, "%.1000s/m", t);
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(dir, &sh, 3) == 0, "synth tiny: %s", ms_err_msg());

    ms_engine_opts o = {0};
    o.model_dir = dir;
    o.run.n_threads = 2;
    o.run.ram_budget = 16ull << 30;
    o.run.baseline = 1;
    o.run.max_positions = PROMPT + 8;
    o.run.prompt_tokens = PROMPT;
    o.run.max_chunk = 16;
    o.run.max_span = PROMPT; /* spans asked for (with plenty of memory the plan would keep chunks) */
    o.max_seqs = 2;
    ms_engine *e = ms_engine_open(&o);
    T_CHECK(e != NULL, "engine opens: %s", e ? "" : ms_err_msg());
    if (!e) return ms_t_done();
    ms_model *model = ms_engine_model(e);
    int64_t span = ms_model_span(model);
    T_CHECK(span >= PROMPT, "the plan takes the %d-token prompt in one span (span %lld)", PROMPT, (long long)span);

    static seen w;
    ms_model_set_layer_observer(model, watch, &w);
    g_m = ms_smetrics_new();
    g_s = ms_sengine_start(e, 2, 4, g_m, NULL);
    T_CHECK(g_s != NULL, "engine thread starts: %s", g_s ? "" : ms_err_msg());
    if (!g_s) return ms_t_done();

    int32_t ids[PROMPT];
    for (int i = 0; i < PROMPT; i++) ids[i] = (int32_t)((i * 37 + 11) % (sh.vocab - 10));
    ms_sched_job j;
    memset(&j, 0, sizeof j);
    j.prompt = ids;
    j.n_prompt = PROMPT;
    j.max_tokens = 3;
    int status = 0;
    ms_sreqh *h = ms_sengine_submit(g_s, &j, 0, &status);
    T_CHECK(h != NULL, "submitted (status %d)", status);
    int ended = 0;
    ms_sreq_news n;
    memset(&n, 0, sizeof n);
    for (int guard = 0; h && guard < 200 && !ended; guard++) {
        if (ms_sreqh_wait(h, 5.0, &n) && n.all_done) ended = 1;
        ms_sreq_news_clear(&n);
    }
    T_CHECK(ended, "the request ends");
    if (h) ms_sreqh_release(h);

    /* Every callback: the figures name that layer of that pass. */
    int span_layers = 0, last_zero = 1, bad = 0;
    for (int i = 0; i < w.n; i++) {
        const ms_smetrics_engine *f = &w.f[i];
        if (f->pass_layer != w.layer[i] + 1 || f->pass_layers != w.n_layers[i] || f->pass_rows != w.rows[i] ||
            f->pass_seconds_left < 0)
            bad++;
        if (w.rows[i] == PROMPT) span_layers++;
        if (w.layer[i] == w.n_layers[i] - 1 && f->pass_seconds_left != 0.0) last_zero = 0;
    }
    T_CHECK(w.n > 0 && bad == 0, "%d of %d layer callbacks saw figures that disagree with the layer", bad, w.n);
    T_CHECK(w.n > 0 && span_layers == w.n_layers[0], "one pass of %d rows over all %d layers (%d callbacks at that width)",
            PROMPT, w.n > 0 ? w.n_layers[0] : -1, span_layers);
    T_CHECK(last_zero, "no time left at a pass's last layer");
    T_CHECK(!strcmp(w.first_render, "moestream_pass_layers_done 1"), "/metrics during the first layer: '%s'",
            w.first_render);

    /* Between passes (the thread drained, so its last step is over): nothing running. */
    ms_sengine_drain(g_s);
    ms_smetrics_engine f;
    ms_sengine_figures(g_s, &f);
    T_CHECK(f.pass_layer == 0 && f.pass_layers == 0 && f.pass_rows == 0 && f.pass_seconds_left == 0.0,
            "between passes: layer %d of %d, %lld rows", f.pass_layer, f.pass_layers, (long long)f.pass_rows);

    ms_sengine_free(g_s);
    ms_layer_fn fn = NULL;
    void *ctx = NULL;
    ms_model_get_layer_observer(model, &fn, &ctx);
    T_CHECK(fn == watch && ctx == &w, "the model's own observer is back after the thread ends");
    ms_smetrics_free(g_m);
    ms_engine_free(e);
    return ms_t_done();
}
