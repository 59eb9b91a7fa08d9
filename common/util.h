/* util.h — small helpers shared by tcmd, tcmctl and libtcm. */
#ifndef TCM_UTIL_H
#define TCM_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* the text of a macro's value: TCM_STRINGIFY(TCM_RECONNECT_DEFAULT_S) is "30" */
#define TCM_STRINGIFY(x) TCM_STRINGIFY_(x)
#define TCM_STRINGIFY_(x) #x

#ifdef __cplusplus
extern "C" { /* the C++ benchmarks and tcm-kv's Boost heap read sizes with it too */
#endif

/* "64M", "4G", "512k", "1T", "64MiB", "4096": 0 on success, -EINVAL otherwise. */
int tcm__parse_size(const char *s, uint64_t *out);
/* 1536 -> "1.5K"; writes into buf and returns it. */
const char *tcm__format_size(uint64_t v, char *buf, size_t len);
/* 3725 -> "1h02m"; seconds as a short human age. */
const char *tcm__format_age(uint64_t seconds, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
