/* ms_sweb: the chat page serve answers GET / with: its files (coordinator/serve/web, compiled in by deploy/embed_web.cmake) and the reply that sends one. */
#ifndef MS_SWEB_H
#define MS_SWEB_H

#include <stddef.h>

/* One file of the page: its path ("/app.js") and bytes (static, NUL after the last). */
typedef struct {
    const char *path;
    const unsigned char *data;
    size_t len;
} ms_sweb_file;

/* The page's files (generated), ended by one whose path is NULL. */
extern const ms_sweb_file ms_sweb_files[];

/* The file a GET of url asks for ("/" is /index.html; a query string is ignored), or NULL. */
const ms_sweb_file *ms_sweb_find(const char *url);
/* Its Content-Type, from the extension. */
const char *ms_sweb_type(const ms_sweb_file *f);

#endif
