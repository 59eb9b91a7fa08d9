/* realloc_strings.c — strings built one after another by realloc, 8 bytes
 * at a time, to 16-2 015 bytes: each string passes through the classes
 * below its length, and the block realloc moves it out of is followed by
 * the next string's malloc of that class (a JSON or log-line builder). The
 * last 64 strings are kept, each one built replacing the oldest. The case
 * realloc_grow is not: there every block realloc moves out of stays
 * unused, here every one is wanted again at once, so what a cache keeps
 * of a class realloc moved out of decides its speed, not its memory
 * (docs/BENCHMARKS.md, "Real programs under the drop-in"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STRINGS = 400000, KEPT = 64, STEP = 8, LONGEST = 2000 };

int main(void)
{
    static char *kept[KEPT];
    unsigned r = 1;
    size_t total = 0;
    for (int i = 0; i < STRINGS; i++) {
        r = r * 1103515245u + 12345u;
        size_t limit = 16 + (r >> 16) % LONGEST, len = 0;
        char *s = NULL;
        while (len < limit) {
            char *t = realloc(s, len + STEP + 1);
            if (!t)
                abort();
            s = t;
            memset(s + len, 'a', STEP + 1);
            len += STEP;
        }
        int k = (int)((r >> 8) % KEPT);
        free(kept[k]);
        kept[k] = s;
        total += len;
    }
    for (int k = 0; k < KEPT; k++)
        free(kept[k]);
    printf("realloc_strings done: %zu bytes\n", total);
    return 0;
}
