/* size.h — the sizes tcm-kv's options take, in the syntax tcmd and tcmctl
 * read: a decimal count of bytes, or one with K, M, G or T (powers of
 * 1024), optionally followed by i and/or B ("64M", "1GiB", "512kb").
 * tcm-kv's own code (tcm.h has no parser): a server built on tcm copies it
 * or reads sizes its own way. */
#ifndef KV_SIZE_H
#define KV_SIZE_H

#include <stdint.h>

/* 0 and *out set, or -1 (*out untouched) for anything else: no digits
 * first, an unknown suffix, trailing text, or past 2^64 - 1. */
int kv_parse_size(const char *s, uint64_t *out);

#endif
