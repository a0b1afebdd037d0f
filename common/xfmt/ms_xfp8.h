/* ms_xfp8: the fine-grained FP8 release format as configs and checkpoints state it (DeepSeek-V3, Kimi K2, Qwen3's FP8 releases): which encoding a family's experts take. */
#ifndef MS_XFP8_H
#define MS_XFP8_H

#include <jansson.h>

#include "ms_jcfg.h"
#include "ms_xfmt.h"

struct ms_st;

/* The weight encoding a config's quantization_config names: MS_XENC_BF16 when it is absent or
 * null; MS_XENC_FP8 for {"quant_method": "fp8", "weight_block_size": [128, 128]} (with "fmt"
 * "e4m3" and "activation_scheme" "dynamic" where given; other keys ignored); anything else is
 * recorded as a problem in j naming the field, and 0 returned. */
int ms_xfp8_config_enc(ms_jcfg *j, json_t *root);

/* As ms_xfp8_config_enc, and also compressed-tensors' pack-quantized INT4 ({"quant_method":
 * "compressed-tensors", "format": "pack-quantized", one config group of 4-bit symmetric "int"
 * weights in groups of 32, no activation quantization}: Kimi K2-Thinking's routed experts) ->
 * MS_XENC_INT4_G32; its other fields ("ignore": the modules left unquantised) are not needed:
 * every tensor's dtype is read from its header. */
int ms_xquant_config_enc(ms_jcfg *j, json_t *root);

/* The FP8 encoding a checkpoint's scale grid `scale_name` says (its dtype: F32 -> MS_XENC_FP8,
 * BF16 -> MS_XENC_FP8_BF16S) into *enc: 0; 1 when st has no such tensor (a trunk without
 * experts); -1 with ms_err set (MS_EXIT_MODEL) for another dtype, naming the tensor. */
int ms_xfp8_scale_enc(const struct ms_st *st, const char *scale_name, int *enc);

#endif
