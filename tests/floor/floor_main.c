/* A program made of one floor of the engine and the floors below it, whole
 * (tests/CMakeLists.txt): it builds only if no object of those floors calls a
 * floor above, and then says so. */
#include <stdio.h>

int main(void)
{
    printf("ok   " ZLUA_FLOOR " links on the floors below it alone\n");
    return 0;
}
