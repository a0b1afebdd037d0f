/* ms_expert: in-process routed-expert table serving the ms_experts interface. */
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_expert.h"
#include "ms_ops.h"

struct ms_expert_table {
    int n_layers, n_experts, latent;
    float b1, b2;
    ms_pool *pool;          /* borrowed */
    ms_expert_w *w;         /* [n_layers][n_experts] */
};

ms_expert_table *ms_expert_table_new(int n_layers, int n_experts, int latent, float b1, float b2, ms_pool *pool)
{
    ms_expert_table *t = ms_calloc(1, sizeof *t);
    t->n_layers = n_layers;
    t->n_experts = n_experts;
    t->latent = latent;
    t->b1 = b1;
    t->b2 = b2;
    t->pool = pool;
    t->w = ms_calloc((size_t)n_layers * (size_t)n_experts, sizeof *t->w);
    return t;
}

void ms_expert_table_free(ms_expert_table *t)
{
    if (!t) return;
    free(t->w);
    free(t);
}

void ms_expert_table_set(ms_expert_table *t, int layer, int expert, const ms_expert_w *w)
{
    MS_ASSERT(layer >= 0 && layer < t->n_layers && expert >= 0 && expert < t->n_experts);
    t->w[(size_t)layer * (size_t)t->n_experts + (size_t)expert] = *w;
}

/* Rows are grouped by expert so each expert's weights are decoded once per call; every output
 * element is still one canonical dot, so grouping never changes a bit. */
static int table_compute(void *ctx, int layer, int64_t n_rows, const float *z, int k, const int32_t *ids,
                         float *out)
{
    ms_expert_table *t = ctx;
    int64_t L = t->latent;
    if (layer < 0 || layer >= t->n_layers) return ms_err_set("expert request for layer %d out of range", layer);
    int64_t n = n_rows * k;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_experts)
            return ms_err_set("expert id %d out of range in layer %d", ids[i], layer);
        if (!t->w[(size_t)layer * (size_t)t->n_experts + (size_t)ids[i]].w1.data)
            return ms_err_set("layer %d expert %d has no weights loaded", layer, ids[i]);
    }
    int64_t *slot = ms_malloc(sizeof(int64_t) * (size_t)n); /* [n] (row*k + j) using the expert */
    /* A group holds at most n (row, rank) pairs (a row may even repeat an expert). */
    float *zin = ms_malloc(sizeof(float) * (size_t)(n * L)); /* [pairs of this expert][L] */
    float *zout = ms_malloc(sizeof(float) * (size_t)(n * L));
    uint8_t *done = ms_calloc((size_t)n, 1);
    for (int64_t i = 0; i < n; i++) {
        if (done[i]) continue;
        int32_t e = ids[i];
        int64_t m = 0;
        for (int64_t q = i; q < n; q++) {
            if (!done[q] && ids[q] == e) {
                done[q] = 1;
                slot[m] = q;
                memcpy(zin + m * L, z + (q / k) * L, sizeof(float) * (size_t)L);
                m++;
            }
        }
        const ms_expert_w *w = &t->w[(size_t)layer * (size_t)t->n_experts + (size_t)e];
        ms_glu_mlp(&w->w1, &w->w3, &w->w2, t->b1, t->b2, zin, m, zout, t->pool);
        for (int64_t r = 0; r < m; r++) memcpy(out + slot[r] * L, zout + r * L, sizeof(float) * (size_t)L);
    }
    free(done);
    free(zout);
    free(zin);
    free(slot);
    return 0;
}

ms_experts ms_expert_table_iface(ms_expert_table *t)
{
    ms_experts ex = {table_compute, t};
    return ex;
}
