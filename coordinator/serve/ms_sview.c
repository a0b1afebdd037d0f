/* ms_sview: the engine view's JSON from the plan, the serve engine's figures and the experts' use. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ms_err.h"
#include "ms_sview.h"

static json_t *part(const char *name, uint64_t bytes, const char *what)
{
    return json_pack("{s:s,s:I,s:s}", "name", name, "bytes", (json_int_t)bytes, "what", what);
}

/* The budget as the plan spends it: every resident part, adding up to at most the budget. */
static json_t *budget_of(const ms_plan *p)
{
    json_t *parts = json_array();
    uint64_t work = p->in.work_fixed + p->in.work_per_token * (uint64_t)(p->chunk > 0 ? p->chunk : 0);
    json_array_append_new(parts, part("baseline", p->in.baseline, "code, tokenizer, small tensors"));
    json_array_append_new(parts, part("pinned trunk", p->pinned_bytes, "trunk matrices kept resident"));
    json_array_append_new(parts, part("trunk ring", p->streaming ? p->in.ring : 0, "buffers the streamed trunk passes through"));
    json_array_append_new(parts, part("expert cache", p->cache, "routed experts kept between passes"));
    json_array_append_new(parts, part("sequence states", p->in.state, "caches and recurrent states of the sequences"));
    json_array_append_new(parts, part("prefix cache", p->in.state_cache, "saved states of shared prompts"));
    json_array_append_new(parts, part("working buffers", work + p->in.expert_fixed, "a pass's activations and expert reads"));
    json_array_append_new(parts, part("margin", p->margin, "allocator slack, stacks"));
    return json_pack("{s:I,s:o,s:I,s:I,s:i,s:I}", "total", (json_int_t)p->in.budget, "parts", parts, "streamed_trunk_bytes",
                     (json_int_t)p->streamed_bytes, "expert_bytes", (json_int_t)p->in.expert_bytes, "prefill_chunk",
                     (int)p->chunk, "expert_cache_slots", (json_int_t)p->cache_slots);
}

/* Per layer with routed experts: the rows routed to each expert, and its reads from disk. */
static json_t *experts_of(ms_sengine *s, const ms_model_info *in, int remote)
{
    uint32_t *routes = NULL, *reads = NULL;
    size_t n = ms_sengine_expert_use(s, &routes, &reads);
    json_t *layers = json_array();
    int nl = in->n_experts ? (int)(n / (size_t)in->n_experts) : 0;
    for (int l = in->first_moe; l < nl; l++) {
        json_t *r = json_array(), *d = reads ? json_array() : json_null();
        for (int e = 0; e < in->n_experts; e++) {
            json_array_append_new(r, json_integer(routes[(size_t)l * (size_t)in->n_experts + (size_t)e]));
            if (reads) json_array_append_new(d, json_integer(reads[(size_t)l * (size_t)in->n_experts + (size_t)e]));
        }
        json_array_append_new(layers, json_pack("{s:i,s:b,s:o,s:o}", "layer", l, "draft_head", l >= in->n_layers, "routes", r,
                                                "reads", d));
    }
    free(routes);
    free(reads);
    return json_pack("{s:i,s:i,s:s,s:o}", "experts", in->n_experts, "top_k", in->top_k, "source", remote ? "workers" : "local",
                     "layers", layers);
}

char *ms_sview_json(ms_sengine *s, ms_smetrics *m, const char *model_name, size_t *len)
{
    ms_engine *e = ms_sengine_engine(s);
    const ms_model_info *in = ms_engine_info(e);
    ms_smetrics_engine f;
    ms_sengine_figures(s, &f);
    uint64_t prompt = 0, generated = 0, generations = 0;
    ms_smetrics_token_totals(m, &prompt, &generated, &generations);
    const ms_plan *p = ms_model_plan(ms_engine_model(e));
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(model_name ? model_name : ""));
    json_object_set_new(o, "family", json_string(ms_engine_family(e)->name));
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    json_object_set_new(o, "time", json_real((double)ts.tv_sec + (double)ts.tv_nsec * 1e-9));
    json_object_set_new(o, "started", json_real(ms_smetrics_started(m)));
    json_object_set_new(o, "budget", p ? budget_of(p) : json_null());
    json_object_set_new(
        o, "counters",
        json_pack("{s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "busy_seconds", f.busy_seconds,
                  "steps", (json_int_t)f.steps, "passes", (json_int_t)f.passes, "pass_rows", (json_int_t)f.pass_rows_total,
                  "decode_tokens", (json_int_t)f.decode_tokens, "prefill_rows", (json_int_t)f.prefill_rows, "bytes_read_trunk",
                  (json_int_t)f.bytes_read_trunk, "bytes_read_experts", (json_int_t)f.bytes_read_experts, "bytes_read_at_load",
                  (json_int_t)f.bytes_read_at_load, "expert_requests", (json_int_t)f.cache_requests, "io_wait_seconds",
                  f.io_wait_seconds, "expert_cache_hits", (json_int_t)f.cache_hits, "expert_cache_misses",
                  (json_int_t)f.cache_misses, "expert_cache_used_bytes",
                  (json_int_t)f.cache_used, "drafted", (json_int_t)f.drafted, "accepted", (json_int_t)f.accepted,
                  "prompt_tokens", (json_int_t)prompt, "generated_tokens", (json_int_t)generated, "generations",
                  (json_int_t)generations));
    json_object_set_new(o, "batch",
                        json_pack("{s:i,s:i,s:i}", "running", f.batch_size, "queued", f.queue_depth, "max", f.max_batch));
    json_object_set_new(o, "pass",
                        json_pack("{s:i,s:i,s:I,s:f}", "layer", f.pass_layer, "layers", f.pass_layers, "rows",
                                  (json_int_t)f.pass_rows, "seconds_left", f.pass_seconds_left));
    json_object_set_new(o, "workers",
                        json_pack("{s:i,s:i,s:I,s:I,s:I}", "listed", f.workers, "up", f.workers_up, "requests",
                                  (json_int_t)f.worker_requests, "resends", (json_int_t)f.worker_resends, "failovers",
                                  (json_int_t)f.worker_failovers));
    json_t *wl = json_array(); /* one line per worker (empty: the experts run here) */
    ms_engine_stats es;
    ms_sengine_engine_stats(s, &es);
    for (int i = 0; i < es.remote.n_view; i++)
        json_array_append_new(wl, json_pack("{s:s,s:s,s:s,s:I,s:I,s:f}", "endpoint", es.remote.view[i].endpoint, "state",
                                            es.remote.view[i].state, "why", es.remote.view[i].why, "requests",
                                            (json_int_t)es.remote.view[i].requests, "replies",
                                            (json_int_t)es.remote.view[i].replies, "reply_seconds",
                                            es.remote.view[i].reply_seconds));
    json_object_set_new(json_object_get(o, "workers"), "list", wl);
    json_object_set_new(o, "experts", experts_of(s, in, f.workers > 0));
    char *t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    *len = strlen(t);
    return t;
}
