/* ms_stdout: the final check that everything written to standard output reached it. */
#include <errno.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <string.h>

#include "ms_err.h"
#include "ms_stdout.h"

static int first_err;

void ms_stdout_note_error(int err)
{
    if (!first_err) first_err = err;
}

int ms_stdout_close(void)
{
    int earlier = ferror(stdout); /* a write failed before (errno of that failure is long gone) */
    int pending = __fpending(stdout) != 0;
    errno = 0;
    int flush_failed = fflush(stdout) != 0;
    int err = errno;
    if (!flush_failed) {
        errno = 0;
        /* EBADF with nothing written: stdout was closed on purpose (`cmd >&-`) */
        if (fclose(stdout) != 0 && (earlier || pending || errno != EBADF)) {
            flush_failed = 1;
            err = errno;
        }
    } else {
        fclose(stdout);
    }
    if (!earlier && !flush_failed) return 0;
    /* a failed write usually fails again on the final flush, which gives the reason */
    if (!err) err = first_err;
    ms_err_set("cannot write to standard output: %s", err ? strerror(err) : "write error");
    ms_err_set_code(MS_EXIT_IO);
    return -1;
}
