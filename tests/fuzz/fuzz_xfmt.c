/* fuzz_xfmt: libFuzzer harness for the expert format descriptor, from JSON (manifests) and from protobuf (hellos) (first byte: which). */
#include "fuzz_util.h"
#include "ms_xfmt.h"

/* An accepted descriptor is consistent and survives both encodings unchanged. */
static void check_accepted(const ms_xfmt *f)
{
    char why[256];
    FUZZ_CHECK(ms_xfmt_check(f, why, sizeof why) == 0);
    FUZZ_CHECK(f->n_mats >= 1 && f->n_mats <= MS_XFMT_MAX_MATS && f->n_parts >= 1 && f->n_parts <= MS_XFMT_MAX_PARTS);
    uint64_t sum = 0;
    for (int i = 0; i < f->n_parts; i++) {
        FUZZ_CHECK(f->part[i].mat >= 0 && f->part[i].mat < f->n_mats);
        sum += f->part[i].bytes;
    }
    FUZZ_CHECK(sum == ms_xfmt_expert_bytes(f) && sum > 0);
    json_t *j = ms_xfmt_to_json(f);
    ms_xfmt g;
    FUZZ_CHECK(ms_xfmt_from_json(j, "fuzz", &g) == 0);
    json_decref(j);
    FUZZ_CHECK(ms_xfmt_diff(f, &g, why, sizeof why) == 0);
    ms_xfmt_pb keep;
    Moestream__ExpertFormat *pb = ms_xfmt_to_proto(f, &keep);
    FUZZ_CHECK(ms_xfmt_from_proto(pb, &g, why, sizeof why) == 0);
    FUZZ_CHECK(ms_xfmt_diff(f, &g, why, sizeof why) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    if (len == 0) return 0;
    fuzz_dir();
    ms_xfmt f;
    char why[256] = "";
    if (data[0] & 1) {
        Moestream__ExpertFormat *pb = moestream__expert_format__unpack(NULL, len - 1, data + 1);
        if (!pb) return 0;
        if (ms_xfmt_from_proto(pb, &f, why, sizeof why) == 0) {
            check_accepted(&f);
        } else {
            fuzz_refused(why);
            FUZZ_CHECK(why[0] != 0);
        }
        moestream__expert_format__free_unpacked(pb, NULL);
    } else {
        json_error_t je;
        json_t *o = json_loadb((const char *)data + 1, len - 1, JSON_REJECT_DUPLICATES, &je);
        if (!o) return 0;
        if (ms_xfmt_from_json(o, "fuzz", &f) == 0) {
            check_accepted(&f);
        } else {
            fuzz_refused(ms_err_msg());
            FUZZ_CHECK(ms_err_msg()[0] != 0);
        }
        json_decref(o);
    }
    return 0;
}
