/* Size classes: every size maps to the smallest class that fits, rounding
 * waste stays within 1/8 above 128 B, and the class table is consistent. */
#include <string.h>

#include "check.h"
#include "tcm_layout.h"

int main(void)
{
    tcm_class_info_t tab[TCM_NCLASSES];
    tcm__class_table_init(tab);

    for (size_t s = 0; s <= TCM_MAX_SMALL; s++) {
        unsigned c = tcm__size_class(s);
        CHECK(c >= 1 && c < TCM_NCLASSES);
        CHECK_GE(tab[c].size, s);
        if (c > 1)
            CHECK_LT(tab[c - 1].size, s); /* the smallest class that fits */
        if (s > 128)
            CHECK_LE((tab[c].size - s) * 8, s);
    }
    CHECK_EQ(tcm__size_class(TCM_MAX_SMALL), TCM_NCLASSES - 1);
    CHECK_EQ(tab[TCM_NCLASSES - 1].size, TCM_MAX_SMALL);

    for (unsigned c = 1; c < TCM_NCLASSES; c++) {
        const tcm_class_info_t *ci = &tab[c];
        CHECK_EQ(ci->size % TCM_ALIGN, 0);
        CHECK_GT(ci->size, tab[c - 1].size);
        uint64_t span = (uint64_t)ci->span_pages * TCM_PAGE_SIZE;
        CHECK_EQ(ci->span_objs, span / ci->size);
        CHECK_GE(ci->span_objs, 1);
        CHECK_LE(span - (uint64_t)ci->span_objs * ci->size, span / 8); /* tail waste */
        CHECK_LE(ci->span_objs, (uint64_t)ci->span_pages * TCM_PAGE_SIZE / TCM_ALIGN);
        CHECK(ci->batch >= 1 && ci->batch <= TCM_MAX_BATCH);
        CHECK_GE(ci->tcache_cap, ci->batch);
        CHECK_GE(ci->xfer_cap, ci->batch);
        /* the daemon's division by multiplication is exact on object starts
         * and never maps a non-start to a start */
        for (uint64_t rel = 0; rel < (uint64_t)ci->span_objs * ci->size; rel += 16) {
            uint32_t i = (uint32_t)((rel * ci->recip) >> 32);
            CHECK_EQ((uint64_t)i * ci->size == rel, rel % ci->size == 0);
        }
        CHECK_EQ(tcm__class_size(c), ci->size);
    }

    /* the seed's reversal cases fit in one thread cache */
    CHECK_GE(tab[tcm__size_class(16384)].tcache_cap, 64);
    CHECK_GE(tab[tcm__size_class(64)].tcache_cap, 2048);

    tcm_chan_layout_t l;
    tcm__chan_layout(&l, tab, 16, false);
    CHECK_GE(l.ring_cap, l.nslots);
    CHECK_EQ(l.ring_cap & (l.ring_cap - 1), 0);
    CHECK_EQ(l.off_tcaches % 4096, 0);
    CHECK_GE(l.off_xfer, l.off_tcaches + 16 * l.tcache_stride);
    printf("classes: %u, largest %u\n", TCM_NCLASSES - 1, tab[TCM_NCLASSES - 1].size);
    return 0;
}
