/* fuzz_wire: libFuzzer harness for one protocol message through ms_wire_unpack (the decoder and checks both sides use). */
#include "fuzz_util.h"
#include "ms_wire.h"

/* Unknown fields of m and its sub-messages hidden (count saved in *saved, at most 64 messages)
 * or, with restore = 1, put back. protobuf-c keeps unknown fields and re-encodes them; it
 * accepts field number 0 when the tag is a non-minimal varint and refuses the minimal one it
 * writes back, so the round trip below is checked on the known fields only. moestream never
 * forwards a received message. */
static void unknown_fields(ProtobufCMessage *m, size_t *saved, int *k, int restore)
{
    if (!m || *k >= 64) return;
    int me = (*k)++;
    if (restore)
        m->n_unknown_fields = (unsigned)saved[me];
    else
        saved[me] = m->n_unknown_fields, m->n_unknown_fields = 0;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned f = 0; f < d->n_fields; f++) {
        const ProtobufCFieldDescriptor *fd = &d->fields[f];
        if (fd->type != PROTOBUF_C_TYPE_MESSAGE) continue;
        char *base = (char *)m;
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(size_t *)(base + fd->quantifier_offset);
            ProtobufCMessage **arr = *(ProtobufCMessage ***)(base + fd->offset);
            for (size_t i = 0; i < n; i++) unknown_fields(arr[i], saved, k, restore);
        } else {
            if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
                uint32_t c = *(uint32_t *)(base + fd->quantifier_offset);
                if (c != fd->id) continue;
            }
            unknown_fields(*(ProtobufCMessage **)(base + fd->offset), saved, k, restore);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    fuzz_dir();
    char why[256] = "";
    int code = -1;
    Moestream__Envelope *e = ms_wire_unpack(data, len, why, sizeof why, &code);
    if (!e) {
        fuzz_refused(why);
        FUZZ_CHECK(why[0] != 0);
        FUZZ_CHECK(code == MOESTREAM__ERROR__CODE__VERSION || code == MOESTREAM__ERROR__CODE__BAD_MESSAGE ||
                   code == MOESTREAM__ERROR__CODE__TOO_LARGE || code == MOESTREAM__ERROR__CODE__FORMAT);
        return 0;
    }
    /* Accepted: what the header promises to the worker and the coordinator holds. */
    FUZZ_CHECK(e->protocol_version == MS_WIRE_VERSION);
    switch (e->body_case) {
    case MOESTREAM__ENVELOPE__BODY_HELLO:
        FUZZ_CHECK(e->hello->client_uuid.len == 16);
        FUZZ_CHECK(e->hello->model_fingerprint != NULL && e->hello->expert_format != NULL);
        break;
    case MOESTREAM__ENVELOPE__BODY_HELLO_REPLY: {
        const Moestream__HelloReply *h = e->hello_reply;
        FUZZ_CHECK(h->worker_uuid.len == 16 && h->model_fingerprint != NULL && h->expert_format != NULL);
        for (size_t i = 0; i < h->n_owned; i++) FUZZ_CHECK(h->owned[i] != NULL);
        break;
    }
    case MOESTREAM__ENVELOPE__BODY_COMPUTE: {
        const Moestream__ComputeRequest *c = e->compute;
        FUZZ_CHECK(c->request_uuid.len == 16 && c->rows > 0 && c->latent_width > 0);
        FUZZ_CHECK((uint64_t)c->rows * c->latent_width == c->n_activations);
        FUZZ_CHECK(c->n_item_row == c->n_item_expert && c->n_item_row > 0);
        volatile float s = 0;
        s += c->activations[0] + c->activations[c->n_activations - 1];
        (void)s;
        for (size_t i = 0; i < c->n_item_row; i++) FUZZ_CHECK(c->item_row[i] < c->rows);
        break;
    }
    case MOESTREAM__ENVELOPE__BODY_COMPUTE_REPLY: {
        const Moestream__ComputeReply *r = e->compute_reply;
        FUZZ_CHECK(r->request_uuid.len == 16);
        FUZZ_CHECK((uint64_t)r->items * r->latent_width == r->n_outputs);
        break;
    }
    case MOESTREAM__ENVELOPE__BODY_ERROR:
        FUZZ_CHECK(e->error->message != NULL);
        break;
    default:
        FUZZ_CHECK(e->body_case != MOESTREAM__ENVELOPE__BODY__NOT_SET);
        break;
    }
    /* Encoding what was accepted and decoding it again gives the same message. */
    uint8_t *b1, *b2;
    size_t n1, n2, saved[64];
    int k = 0;
    unknown_fields(&e->base, saved, &k, 0);
    ms_wire_pack(e, &b1, &n1);
    k = 0;
    unknown_fields(&e->base, saved, &k, 1);
    Moestream__Envelope *e2 = ms_wire_unpack(b1, n1, why, sizeof why, &code);
    FUZZ_CHECK(e2 != NULL);
    ms_wire_pack(e2, &b2, &n2);
    FUZZ_CHECK(n1 == n2 && memcmp(b1, b2, n1) == 0);
    free(b1);
    free(b2);
    ms_wire_free(e2);
    ms_wire_free(e);
    return 0;
}
