/* ms_stdout: the final check that everything written to standard output reached it. */
#ifndef MS_STDOUT_H
#define MS_STDOUT_H

/* Flush and close stdout. Returns 0 when every write to stdout succeeded (stdio's sticky error
 * flag is clear and the final flush and close worked), or -1 with ms_err set to "cannot write to
 * standard output: <reason>" (class MS_EXIT_IO). A stdout that was closed before anything was
 * written to it is not an error. Call once, at the very end of main; stdout is unusable after. */
int ms_stdout_close(void);
/* Remember why a write to stdout failed (errno of the failing call), for ms_stdout_close's
 * message when the final flush has nothing left to fail on. The first one is kept. */
void ms_stdout_note_error(int err);

#endif
