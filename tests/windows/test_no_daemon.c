/* libtcm on Windows with no tcmd to talk to: tcm_init fails with an errno
 * and a clear line, tcm_malloc returns NULL (ENOMEM), tcm_free(NULL) is a
 * no-op; nothing crashes. */
#include <errno.h>
#include <stdio.h>

#include "check.h"
#include "tcm.h"

int main(void)
{
    int rc = tcm_init("/tcm-test-nobody-serves-this");
    printf("tcm_init: %d\n", rc);
    CHECK_LT(rc, 0);
    errno = 0;
    CHECK(tcm_malloc(64) == NULL);
    CHECK_EQ(errno, ENOMEM);
    tcm_free(NULL);
    printf("smoke: no daemon, no crash\n");
    return 0;
}
