/* The REPL's line reader on a terminal in a build without readline (CMake
 * builds it instead of repl_readline.c): the prompt, then the line as the
 * terminal's own line discipline gives it; no history and no completion. */
#include <stdio.h>
#include "repl_line.h"

void zlx_line_begin(lua_State *L) { (void)L; }

void zlx_line_end(void) {}

zlx_line_status zlx_line_read(const char *prompt, char **out)
{
    fputs(prompt, stdout);
    fflush(stdout);
    zlx_line_status status = zlx_line_plain(out);
    if (status == ZLX_LINE_EOF) fputc('\n', stdout);   /* Ctrl-D: the shell's prompt on a line of its own */
    return status;
}

bool zlx_line_interrupted(void) { return false; }
