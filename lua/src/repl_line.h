/* Private to the zlua executable: how the REPL (repl.c) reads a line from a
 * terminal. repl_readline.c edits it with readline (history, completion, Ctrl-C
 * drops the line); repl_plain.c, in a build without readline, reads it as typed. */
#ifndef ZLX_REPL_LINE_H
#define ZLX_REPL_LINE_H

#include <stdbool.h>
#include <lua.h>

typedef enum zlx_line_status { ZLX_LINE_OK, ZLX_LINE_EOF, ZLX_LINE_INTERRUPTED } zlx_line_status;

/* Before the first read and after the last: L is the state that completion
 * walks; Ctrl-C at the prompt is the editor's between the two. */
void zlx_line_begin(lua_State *L);
void zlx_line_end(void);

/* Shows prompt and reads one line into *out without its newline (malloc'd,
 * the caller frees; NULL unless ZLX_LINE_OK). */
zlx_line_status zlx_line_read(const char *prompt, char **out);

/* Whether Ctrl-C came since the line was read (it is then forgotten). */
bool zlx_line_interrupted(void);

/* One line of stdin as it comes, with no prompt and no editing: repl.c's
 * reader for a pipe, and repl_plain.c's for a terminal. */
zlx_line_status zlx_line_plain(char **out);

#endif
