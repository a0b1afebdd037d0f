/* ms_sview: the engine view's JSON (GET /api/engine): the budget plan, the counters a page turns into rates, the experts' use per layer, the workers. */
#ifndef MS_SVIEW_H
#define MS_SVIEW_H

#include <stddef.h>

#include "ms_sengine.h"
#include "ms_smetrics.h"

/* The document (docs/API.md, "The engine view"), malloc'ed (*len bytes, NUL-terminated after),
 * of the served model named model_name. Safe from any thread. */
char *ms_sview_json(ms_sengine *s, ms_smetrics *m, const char *model_name, size_t *len);

#endif
