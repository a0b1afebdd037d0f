/* fuzz_keys: libFuzzer harness for CURVE key files (--curve-secret, --allow) through ms_wire_read_keys (first byte: secret). */
#include <zmq.h>

#include "fuzz_util.h"
#include "ms_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    if (len == 0) return 0;
    int secret = data[0] & 1;
    const char *path = fuzz_path(0, "keys");
    fuzz_write(path, data + 1, len - 1);
    char(*keys)[41] = NULL;
    int n = ms_wire_read_keys(path, secret ? "--curve-secret" : "--allow", secret, &keys);
    if (n < 0) {
        fuzz_refused(ms_err_msg());
        FUZZ_CHECK(keys == NULL && ms_err_msg()[0] != 0);
        return 0;
    }
    /* Accepted: at least one key (exactly one for a secret), each 40 Z85 characters that
     * decode, each a line of the file. */
    FUZZ_CHECK(n >= 1 && (!secret || n == 1) && keys != NULL);
    for (int i = 0; i < n; i++) {
        uint8_t bin[32];
        FUZZ_CHECK(strlen(keys[i]) == 40 && zmq_z85_decode(bin, keys[i]) != NULL);
        FUZZ_CHECK(memmem(data + 1, len - 1, keys[i], 40) != NULL);
    }
    ms_wire_keys_free(keys, n);
    return 0;
}
