/* cfrac.c — the allocation shape of a bignum factoring loop like cfrac:
 * numbers of a few limbs made, grown with realloc, multiplied into new
 * ones and dropped, millions of times; most live a few operations. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { size_t n; uint32_t *d; } num_t;

static num_t *make(size_t n, uint32_t seed)
{
    num_t *x = malloc(sizeof *x);
    x->n = n;
    x->d = malloc(n * sizeof *x->d);
    for (size_t i = 0; i < n; i++)
        x->d[i] = seed + (uint32_t)i * 2654435761u;
    return x;
}

static num_t *mul(const num_t *a, const num_t *b)
{
    num_t *r = make(a->n + b->n, 0);
    memset(r->d, 0, r->n * sizeof *r->d);
    for (size_t i = 0; i < a->n; i++) {
        uint64_t carry = 0;
        for (size_t j = 0; j < b->n; j++) {
            uint64_t t = (uint64_t)a->d[i] * b->d[j] + r->d[i + j] + carry;
            r->d[i + j] = (uint32_t)t;
            carry = t >> 32;
        }
        r->d[i + b->n] = (uint32_t)carry;
    }
    return r;
}

static void drop(num_t *x)
{
    free(x->d);
    free(x);
}

int main(void)
{
    enum { KEEP = 64 };
    num_t *keep[KEEP];
    for (int i = 0; i < KEEP; i++)
        keep[i] = make(2 + i % 6, (uint32_t)i);
    uint32_t check = 0;
    for (int i = 0; i < 8000000; i++) {
        num_t *a = keep[i % KEEP], *b = keep[(i * 7 + 3) % KEEP];
        num_t *p = mul(a, b);
        if (p->n > 8) { /* too big: shrink it back, as a reduction would */
            p->n = 2 + (size_t)(i % 6);
            p->d = realloc(p->d, p->n * sizeof *p->d);
        }
        check ^= p->d[0];
        drop(keep[(i * 13) % KEEP]);
        keep[(i * 13) % KEEP] = p;
    }
    for (int i = 0; i < KEEP; i++)
        drop(keep[i]);
    printf("cfrac done %u\n", check & 1);
    return 0;
}
