/* Discovery fixture: a well-formed shared library named like a plugin that lacks the entry symbol
 * attnrt_plugin_query (it exports another function instead). */
#include "attnrt/plugin.h"

ATTNRT_PLUGIN_EXPORT int attnrt_plugin_not_the_entry(void) { return 42; }
