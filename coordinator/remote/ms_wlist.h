/* ms_wlist: the workers a coordinator uses, from --workers EP,EP,... or a --cluster JSON file. */
#ifndef MS_WLIST_H
#define MS_WLIST_H

/* One worker to use. */
typedef struct {
    char *endpoint;        /* tcp://host:port or ipc://path, owned */
    char *public_key;      /* the worker's CURVE public key (Z85, 40 chars), owned; NULL = plain */
} ms_remote_worker;

/* Parse a cluster file {"workers": [{"endpoint": "...", "public_key": "<Z85>"}, ...]}: every
 * endpoint checked (ms_wire_check_endpoint), every key a Z85 CURVE key. On success *w is a
 * malloc'ed array of *n (free with ms_wlist_free); else -1 with ms_err set (MS_EXIT_USAGE)
 * naming the file and the worker. */
int ms_wlist_load_cluster(const char *path, ms_remote_worker **w, int *n);
/* Parse "EP,EP,..." (no keys). Every endpoint is checked: a malformed one is a usage error
 * quoting it. */
int ms_wlist_parse(const char *list, ms_remote_worker **w, int *n);
void ms_wlist_free(ms_remote_worker *w, int n); /* accepts NULL */

#endif
