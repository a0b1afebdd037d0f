/* test_xfams: the expert-family table: detection by model_type, a config's expert shapes and descriptor, where a checkpoint keeps each part, checks of a peer's descriptor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_st.h"
#include "ms_synth.h"
#include "ms_test.h"
#include "ms_k3_experts.h"
#include "ms_xfams.h"

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* gpt-oss: every layer routes; each expert is slice e of its layer's six [E, ...] tensors; the
 * biases' dtype comes from the checkpoint's headers (F32 in tiny-s7, BF16 as released). */
static void check_gptoss(void)
{
    const char *p = ms_t_shared("fixtures/gpt-oss/checkpoints/tiny-s7");
    if (!p) return;
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s", p);
    snprintf(path, sizeof path, "%s/config.json", dir);
    ms_xmodel xm;
    T_CHECK(ms_xfam_load(path, 1, &xm) == 0 && !strcmp(xm.family, "gpt-oss") && xm.first_moe == 0 &&
                xm.n_experts == 8 && xm.top_k == 4 && xm.fmt.act == MS_XACT_SWIGLU_CLAMP && xm.fmt.n_mats == 2 &&
                xm.fmt.mat[0].role == MS_XROLE_GATE_UP && xm.fmt.mat[0].rows == 128 && xm.fmt.mat[0].cols == 96 &&
                xm.fmt.mat[1].role == MS_XROLE_DOWN && xm.fmt.n_parts == 6 && xm.fmt.mat[0].bias_dtype == MS_DT_BF16,
            "gpt-oss from its config: gate_up [2I, H] and down [H, I] with biases (BF16 until refined): %s", ms_err_msg());
    ms_st *st = ms_st_open_dir(dir);
    T_CHECK(st && ms_xfam_refine(&xm.fmt, 0, st, dir) == 0 && xm.fmt.mat[0].bias_dtype == MS_DT_F32 &&
                xm.fmt.part[2].bytes == 128 * 4,
            "refined from tiny-s7's headers: F32 biases (%s)", ms_err_msg());
    int bad = 0;
    for (int e = 0; e < 8 && st; e++)
        for (int k = 0; k < xm.fmt.n_parts; k++) {
            char name[256], why[300];
            int file;
            uint64_t off;
            int rc = ms_xfam_find_part(st, &xm.fmt, 2, e, k, name, sizeof name, &file, &off, why, sizeof why);
            const ms_st_tensor *t = ms_st_find(st, name);
            bad += rc != 0 || !t || off != t->offset + (uint64_t)e * xm.fmt.part[k].bytes;
        }
    T_CHECK(st && bad == 0, "each of 8 experts' 6 parts is its slice of the layer's tensors (%d bad)", bad);
    ms_st_close(st);
    char why[300];
    T_CHECK(ms_xfmt_check(&xm.fmt, why, sizeof why) == 0 && ms_xfam_check(&xm.fmt, "peer") == 0,
            "the refined descriptor is consistent and the family's own: %s", why);
}

int main(void)
{
    ms_log_set_level(0);
    char dir[1024], path[1100];
    ms_synth_shape sh;
    ms_t_synth_tiny("xfams", 5, dir, sizeof dir, &sh);

    /* The released shape (nested, model_type kimi_k3) describes K3's experts. */
    snprintf(path, sizeof path, "%s/config.json", dir);
    ms_xmodel xm;
    T_CHECK(ms_xfam_load(path, 1, &xm) == 0, "a K3 config: %s", ms_err_msg());
    T_CHECK(!strcmp(xm.family, "kimi-k3") && xm.n_layers == sh.n_layers && xm.n_experts == sh.n_experts &&
                xm.top_k == sh.top_k && xm.first_moe == 1 && xm.have_fmt && xm.fmt.latent == sh.latent &&
                xm.fmt.inter == sh.moe_inter && xm.fmt.n_params == 2,
            "K3: layers %d, experts %d, first routed layer %d, latent %d", xm.n_layers, xm.n_experts, xm.first_moe,
            xm.fmt.latent);
    char why[300];
    T_CHECK(ms_xfmt_check(&xm.fmt, why, sizeof why) == 0 && ms_xfam_check(&xm.fmt, "peer") == 0,
            "the family's descriptor is consistent and its own: %s", why);
    /* roles are named; storage order is the family's */
    T_CHECK(xm.fmt.mat[ms_xfmt_mat_of(&xm.fmt, MS_XROLE_GATE)].name[1] == '1' &&
                xm.fmt.mat[ms_xfmt_mat_of(&xm.fmt, MS_XROLE_DOWN)].name[1] == '2' &&
                xm.fmt.mat[ms_xfmt_mat_of(&xm.fmt, MS_XROLE_UP)].name[1] == '3' && ms_xfmt_mat_of(&xm.fmt, MS_XROLE_GATE_UP) < 0,
            "K3's w1, w2, w3 are gate, down, up");

    /* Every part of every expert is found where the family says, with its bytes. */
    ms_st *st = ms_st_open_dir(dir);
    int bad = 0, n = 0;
    for (int l = xm.first_moe; l < xm.n_layers && st; l++)
        for (int e = 0; e < xm.n_experts; e++)
            for (int k = 0; k < xm.fmt.n_parts; k++) {
                char name[256];
                int file;
                uint64_t off;
                int rc = ms_xfam_find_part(st, &xm.fmt, l, e, k, name, sizeof name, &file, &off, why, sizeof why);
                const ms_st_tensor *t = ms_st_find(st, name);
                bad += rc != 0 || !t || off != t->offset || t->nbytes != xm.fmt.part[k].bytes;
                n++;
            }
    T_CHECK(st && bad == 0 && n > 0, "%d expert parts located and checked (%d bad)", n, bad);
    /* a part of another dtype is named with what it is and what was expected */
    if (st) {
        ms_xfmt wrong = xm.fmt;
        wrong.part[0].dtype = MS_DT_BF16;
        char name[256];
        int file;
        uint64_t off;
        int rc = ms_xfam_find_part(st, &wrong, 1, 0, 0, name, sizeof name, &file, &off, why, sizeof why);
        T_CHECK(rc == 1 && has(why, "is U8") && has(why, "expected BF16") && has(name, "experts.0.w1.weight_packed"),
                "a part of another dtype: %s: %s", name, why);
        rc = ms_xfam_find_part(st, &xm.fmt, 1, sh.n_experts, 0, name, sizeof name, &file, &off, why, sizeof why);
        T_CHECK(rc == 1 && has(why, "missing"), "an expert past the last: %s %s", name, why);
    }
    ms_st_close(st);

    /* A peer's descriptor that is not the family's own is refused naming the field. */
    ms_xfmt other = xm.fmt;
    snprintf(other.part[4].name, sizeof other.part[4].name, "w3.bias");
    T_CHECK(ms_xfam_check(&other, "manifest.json") == -1 && ms_err_code() == MS_EXIT_MODEL &&
                has(ms_err_msg(), "manifest.json") && has(ms_err_msg(), "parts[4].name"),
            "a renamed part: %s", ms_err_msg());
    snprintf(other.family, sizeof other.family, "no-such");
    T_CHECK(ms_xfam_check(&other, "peer") == -1 && has(ms_err_msg(), "no-such"), "an unknown family: %s", ms_err_msg());

    /* Detection: a family this build does not know is named, with the ones it knows. */
    const char *d = ms_t_tmpdir("xfams-configs");
    snprintf(path, sizeof path, "%s/gptoss.json", d);
    write_text(path, "{\"model_type\": \"llama\", \"num_hidden_layers\": 2}");
    T_CHECK(ms_xfam_load(path, 1, &xm) == -1 && ms_err_code() == MS_EXIT_MODEL && has(ms_err_msg(), "\"llama\"") &&
                has(ms_err_msg(), "kimi-k3") && has(ms_err_msg(), "gpt-oss"),
            "an unknown model_type: %s", ms_err_msg());
    check_gptoss();
    /* The flat fixture shape (no model_type) is K3's; its problems are named all at once. */
    snprintf(path, sizeof path, "%s/flat.json", d);
    write_text(path, "{\"num_hidden_layers\": 4, \"num_experts\": 8, \"num_experts_per_token\": 9, "
                     "\"first_k_dense_replace\": 1, \"routed_expert_hidden_size\": 48, \"moe_intermediate_size\": 64, "
                     "\"situ_beta\": 4, \"situ_linear_beta\": 25}");
    T_CHECK(ms_xfam_load(path, 0, &xm) == -1 && has(ms_err_msg(), "num_experts_per_token = 9 exceeds num_experts = 8"),
            "flat: top-k beyond the experts: %s", ms_err_msg());
    write_text(path, "{\"num_hidden_layers\": 4, \"num_experts\": 8, \"num_experts_per_token\": 2, "
                     "\"first_k_dense_replace\": 1, \"routed_expert_hidden_size\": 48, \"moe_intermediate_size\": 64, "
                     "\"situ_beta\": 4, \"situ_linear_beta\": 25}");
    T_CHECK(ms_xfam_load(path, 0, &xm) == 0 && !xm.have_fmt && has(xm.why, "48"),
            "flat: widths that make no MXFP4 descriptor: described, without a format (%s)", xm.why);
    T_CHECK(ms_xfam_load(path, 1, &xm) == -1 && has(ms_err_msg(), "multiples of 32"),
            "...and refused where a format is needed: %s", ms_err_msg());
    return ms_t_done();
}
