/* fuzz_endpoint: libFuzzer harness for worker endpoints (--listen, --workers, cluster files) through ms_wire_check_endpoint (first byte: bind). */
#include "fuzz_util.h"
#include "ms_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    if (len == 0) return 0;
    fuzz_dir();
    int bind = data[0] & 1;
    char *ep = fuzz_cstr(data + 1, len - 1);
    if (ms_wire_check_endpoint(ep, bind) != 0) {
        fuzz_refused(ms_err_msg());
        FUZZ_CHECK(ms_err_msg()[0] != 0 && ms_err_code() == MS_EXIT_USAGE);
    } else {
        /* Accepted: one of the three transports with something after it. */
        FUZZ_CHECK((!strncmp(ep, "tcp://", 6) && ep[6]) || (!strncmp(ep, "ipc://", 6) && ep[6]) ||
                   (!strncmp(ep, "inproc://", 9) && ep[9]));
    }
    free(ep);
    return 0;
}
