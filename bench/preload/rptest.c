/* rptest.c — a request/response loop of mixed sizes, like rptest: 2
 * threads, each handling OPS requests; a request allocates a buffer of 16 B
 * to 8 KiB and a response of another size, keeps a window of 1024 live
 * responses and frees the oldest. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OPS = 8000000, WINDOW = 1024 };

static void *worker(void *arg)
{
    unsigned s = (unsigned)(long)arg * 2654435761u + 1;
    void **win = calloc(WINDOW, sizeof *win);
    for (int i = 0; i < OPS; i++) {
        s = s * 1103515245u + 12345u;
        size_t rq = 16 + (s >> 8) % 8177;
        char *req = malloc(rq);
        memset(req, 1, rq < 64 ? rq : 64);
        s = s * 1103515245u + 12345u;
        /* (the top bit: an LCG's lowest alternates, and with two steps a
         * request it gave each thread one half of the mix for good) */
        size_t rs = 16 + (s >> 8) % (s >> 31 ? 512 : 8177);
        char *resp = malloc(rs);
        memcpy(resp, req, rs < 16 ? rs : 16);
        free(req);
        free(win[i % WINDOW]);
        win[i % WINDOW] = resp;
    }
    for (int i = 0; i < WINDOW; i++)
        free(win[i]);
    free(win);
    return NULL;
}

int main(void)
{
    pthread_t t[2];
    for (long i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    puts("rptest done");
    return 0;
}
