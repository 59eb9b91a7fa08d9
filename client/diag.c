/* diag.c — what libtcm says on stderr: fatal errors, one-time warnings,
 * and notes shown only with TCM_VERBOSE. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "client.h"
#include "diag.h"

static void say(const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "tcm: %s\n", msg);
}

TCM_COLD void tcm__fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
    abort();
}

TCM_COLD void tcm__warn_once(const char *what)
{
    fprintf(stderr, "tcm: %s\n", what);
}

TCM_COLD void tcm__note(const char *fmt, ...)
{
    const char *v = tcm__env("TCM_VERBOSE");
    if (!v || !*v || *v == '0')
        return;
    va_list ap;
    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
}
