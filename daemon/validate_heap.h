/* validate_heap.h — the heap's own part of the validator (validate_heap.c). */
#ifndef TCM_VALIDATE_HEAP_H
#define TCM_VALIDATE_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "heap.h"

/* The page heap and central lists against the page map and the object
 * map; false and the first inconsistency in why. */
bool tcm__heap_validate_ht(tcm_heap_t *h, char *why, size_t whylen);
/* held[tag] += bytes of the objects and runs each client tag owns; the total. */
uint64_t tcm__census_ht(const tcm_heap_t *h, uint64_t *held);

#endif
