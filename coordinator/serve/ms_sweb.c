/* ms_sweb: the page's files looked up by path, and their types. */
#include <string.h>

#include "ms_sweb.h"

const ms_sweb_file *ms_sweb_find(const char *url)
{
    size_t n = strcspn(url, "?#");
    if (n == 1 && url[0] == '/') url = "/index.html", n = 11;
    for (const ms_sweb_file *f = ms_sweb_files; f->path; f++)
        if (strlen(f->path) == n && !memcmp(f->path, url, n)) return f;
    return NULL;
}

const char *ms_sweb_type(const ms_sweb_file *f)
{
    const char *dot = strrchr(f->path, '.');
    if (dot && !strcmp(dot, ".html")) return "text/html; charset=utf-8";
    if (dot && !strcmp(dot, ".css")) return "text/css; charset=utf-8";
    if (dot && !strcmp(dot, ".js")) return "text/javascript; charset=utf-8";
    return "application/octet-stream";
}
