/* ms_synth: writes random Kimi K3 checkpoints in the released on-disk layout. */
#ifndef MS_SYNTH_H
#define MS_SYNTH_H

#include <stdint.h>

#define MS_SYNTH_MAX_LAYERS 128

/* Shape knobs of a synthetic model; ms_synth_preset fills them for a named preset. */
typedef struct {
    int hidden, n_layers, vocab, kda_heads, kda_head_dim, conv_k;
    int mla_heads, q_lora, kv_lora, qk_nope, qk_rope, v_head;
    int n_experts, top_k, n_shared, latent, moe_inter, dense_inter, attn_res_block;
    int n_full_attn, full_attn[64]; /* ONE-based MLA layers */
    int tok_ranks;                  /* tokenizer ranks (0 = no tokenizer) */
    int n_shards;                   /* safetensors shards (1 = model.safetensors, else + index) */
    int router_bf16;                /* router gate stored as BF16 (else F32) */
    int name_total;                 /* the total in shard file names (0 = n_shards) */
    int sparse;                     /* headers only: every tensor's data is a hole (zeros) */
} ms_synth_shape;

/* Fill *sh for preset name: "tiny" (a few hundred KB), "small" (about 650 MB, 512 experts a
 * layer), "k3-slice" (the released K3 widths, 3 layers by default: dense layer 0, a KDA+MoE
 * layer, an MLA+MoE layer; about 40 GB) or "k3-full" (the released Kimi K3 text path: 93
 * layers, 1.56 TB, in the release's shard names: layer i in model-000{i+1}-of-000096, the
 * embedding, LM head and final norms in shard 94; shards 95-96, the vision tower's, are not
 * written). Returns 0, or -1 with ms_err set for an unknown name. */
int ms_synth_preset(const char *name, ms_synth_shape *sh);
/* Set the layer count (1..MS_SYNTH_MAX_LAYERS) with the released layer map cut to n layers (MLA at every 4th
 * one-based layer and at the last) and one shard per layer plus one. */
void ms_synth_set_layers(ms_synth_shape *sh, int n);

/* Write config.json (nested released shape), the safetensors shard(s) (+ index), and a
 * tokenizer when tok_ranks > 0, into dir (created if missing). Deterministic per seed. With
 * sh->sparse the shards are sparse files: real headers, every data byte a hole (zero weights,
 * almost no disk used), whatever the seed.
 * Returns 0, or -1 with ms_err set (class MS_EXIT_IO) naming the file that failed. */
int ms_synth_write(const char *dir, const ms_synth_shape *sh, uint64_t seed);

#endif
