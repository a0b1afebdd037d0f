/* ms_gptoss_tools: harmony's tool definitions, rendered as the released chat_template.jinja renders them. */
#ifndef MS_GPTOSS_TOOLS_H
#define MS_GPTOSS_TOOLS_H

#include <jansson.h>
#include <stddef.h>

#include "ms_family.h"

/* The developer message's function definitions for an OpenAI "tools" list
 * ([{"type": "function", "function": {"name", "description", "parameters"}}]):
 * "## functions\n\nnamespace functions {\n\n" ... "} // namespace functions", each parameter
 * schema as the template's TypeScript-like type (its quirks kept: a nested object's members
 * start on an indented line, oneOf variants are joined by " | \n"). Malloc'ed (*len bytes), or
 * NULL with ms_err set (MS_EXIT_INPUT, naming tools[i] and the field) where the template would
 * fail: a function without a name or description, a non-object "properties", an enum default
 * that is not a string, a "type" other than "function". */
char *ms_gptoss_tools_namespace(const json_t *tools, size_t *len);

/* harmony's built-in tools (chat_template_kwargs.builtin_tools: "browser", "python"). */
enum { MS_GPTOSS_TOOL_BROWSER = 1, MS_GPTOSS_TOOL_PYTHON = 2 };
/* The system message's text of a built-in tool (MS_GPTOSS_TOOL_BROWSER or MS_GPTOSS_TOOL_PYTHON). */
const char *ms_gptoss_builtin_text(int which);

#endif
