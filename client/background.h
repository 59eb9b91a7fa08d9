/* background.h — the background thread, one per attached process
 * (background.c). */
#ifndef TCM_CLIENT_BACKGROUND_H
#define TCM_CLIENT_BACKGROUND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"

TCM_HIDDEN void tcm__bg_start(void);
TCM_HIDDEN void tcm__bg_stop(void);

#endif
