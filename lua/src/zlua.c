/* zlua: the executable (scripts, -e, REPL, launcher). Being written under issue 2. */
#include <stdio.h>
int main(void) { fputs("zlua: not built yet\n", stderr); return 1; }
