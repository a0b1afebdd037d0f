/* ms_wlist: the workers a coordinator uses, from --workers EP,EP,... or a --cluster JSON file. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ms_err.h"
#include "ms_file.h"
#include "ms_wire.h"
#include "ms_wlist.h"

static char *dup_or_null(const char *s) { return s ? ms_strdup(s) : NULL; }

int ms_wlist_load_cluster(const char *path, ms_remote_worker **w, int *n)
{
    json_error_t je;
    size_t tlen = 0;
    /* a regular file or a pipe, bounded (a FIFO without a writer or a device never hangs) */
    char *text = ms_file_read_all(path, "cluster file", MS_FILE_STREAM, (uint64_t)16 << 20, MS_EXIT_USAGE, &tlen);
    if (!text) return -1;
    json_t *root = json_loadb(text, tlen, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!root) {
        ms_err_set("cluster file %s: %s (line %d)", path, je.text, je.line);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    json_t *arr = json_object_get(root, "workers");
    if (!json_is_array(arr) || json_array_size(arr) == 0) {
        json_decref(root);
        ms_err_set("cluster file %s: \"workers\" must be a non-empty array", path);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    *n = (int)json_array_size(arr);
    *w = ms_calloc((size_t)*n, sizeof **w);
    for (int i = 0; i < *n; i++) {
        json_t *o = json_array_get(arr, (size_t)i);
        const char *ep = json_string_value(json_object_get(o, "endpoint"));
        json_t *pk = json_object_get(o, "public_key");
        if (!ep || (pk && (!json_is_string(pk) || strlen(json_string_value(pk)) != 40))) {
            ms_wlist_free(*w, i);
            json_decref(root);
            ms_err_set("cluster file %s: worker %d needs an \"endpoint\" string and, if given, a 40-character Z85 "
                       "\"public_key\"",
                       path, i);
            return ms_err_set_code(MS_EXIT_USAGE);
        }
        uint8_t bin[32];
        if (pk && !zmq_z85_decode(bin, json_string_value(pk))) {
            ms_wlist_free(*w, i);
            json_decref(root);
            ms_err_set("cluster file %s: worker %d: \"public_key\" is not a Z85 CURVE key", path, i);
            return ms_err_set_code(MS_EXIT_USAGE);
        }
        if (ms_wire_check_endpoint(ep, 0) != 0) {
            ms_wlist_free(*w, i);
            json_decref(root);
            return ms_err_wrap("cluster file %s: worker %d", path, i);
        }
        (*w)[i].endpoint = ms_strdup(ep);
        (*w)[i].public_key = dup_or_null(pk ? json_string_value(pk) : NULL);
    }
    json_decref(root);
    return 0;
}

int ms_wlist_parse(const char *list, ms_remote_worker **w, int *n)
{
    char *s = ms_strdup(list), *save = NULL;
    *n = 0;
    *w = NULL;
    for (char *t = strtok_r(s, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (ms_wire_check_endpoint(t, 0) != 0) {
            free(s);
            ms_wlist_free(*w, *n);
            *w = NULL;
            *n = 0;
            return ms_err_wrap("--workers");
        }
        *w = ms_realloc(*w, sizeof **w * (size_t)(*n + 1));
        (*w)[*n].endpoint = ms_strdup(t);
        (*w)[*n].public_key = NULL;
        (*n)++;
    }
    free(s);
    if (*n == 0) {
        ms_err_set("--workers needs at least one endpoint");
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    return 0;
}

void ms_wlist_free(ms_remote_worker *w, int n)
{
    for (int i = 0; i < n; i++) {
        free(w[i].endpoint);
        free(w[i].public_key);
    }
    free(w);
}
