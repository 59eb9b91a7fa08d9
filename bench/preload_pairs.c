/* preload_pairs.c — malloc+free pairs through whatever malloc the process
 * has (run it under LD_PRELOAD): N pairs of SIZE bytes, a batch of B live
 * at a time. Counted with callgrind (instructions per pair: run with N and
 * with 0, subtract, divide) or timed (prints ns per pair).
 *   cc -O2 -o preload_pairs bench/preload_pairs.c
 *   LD_PRELOAD=.../libtcm-malloc.so ./preload_pairs N SIZE B */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10000000, size = argc > 2 ? atol(argv[2]) : 64;
    long batch = argc > 3 ? atol(argv[3]) : 1;
    void **p = malloc(sizeof *p * (size_t)batch);
    for (long i = 0; i < batch; i++) /* warm: the caches hold a batch */
        p[i] = malloc((size_t)size);
    for (long i = 0; i < batch; i++)
        free(p[i]);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i += batch) {
        for (long j = 0; j < batch; j++)
            p[j] = malloc((size_t)size);
        for (long j = 0; j < batch; j++)
            free(p[j]);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    printf("%ld pairs of %ld bytes: %.2f ns per pair\n", n, size, n ? ns / (double)n : 0.0);
    free(p);
    return 0;
}
