/* fork under a malloc: what fork costs a process that holds HELD MiB of
 * its own malloc (touched), run under each allocator's preload by
 * bench/run_fork.sh. Prints the median of ITER forks, in microseconds,
 * from fork() to the child's exit seen by waitpid:
 *   exit  the child exits at once (fork + exit)
 *   exec  the child execs /bin/true (fork + exec)
 *   save  the child reads every block the parent holds (a BGSAVE writer)
 *         while the parent overwrites an eighth of them (copy-on-write)
 *   hold  no fork: say "held" once the blocks are allocated, and sleep (the
 *         other process that holds memory meanwhile)
 *   fork HELD_MIB ITER exit|exec|save|hold */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    size_t held = strtoull(argv[1], NULL, 10) << 20;
    int iter = atoi(argv[2]);
    const char *mode = argv[3];
    size_t n = 0, cap = held / 512 + 1, total = 0;
    char **blocks = malloc(cap * sizeof *blocks);
    for (size_t size = 1024; total < held; size = size >= 64 << 10 ? 1024 : size * 2) { /* 1 to 64 KiB */
        blocks[n] = malloc(size);
        memset(blocks[n], (int)n, size);
        total += size;
        n++;
    }
    if (!strcmp(mode, "hold")) {
        printf("held\n");
        fflush(stdout);
        for (;;)
            pause();
    }
    double *t = malloc((size_t)iter * sizeof *t);
    for (int i = 0; i < iter; i++) {
        double t0 = now_us();
        pid_t pid = fork();
        if (pid == 0) {
            if (!strcmp(mode, "exec")) {
                execl("/bin/true", "true", (char *)NULL);
                _exit(127);
            }
            unsigned long sum = 0;
            if (!strcmp(mode, "save"))
                for (size_t b = 0; b < n; b++)
                    for (size_t k = 0; k < 1024; k += 64)
                        sum += (unsigned char)blocks[b][k];
            _exit(sum == 1 ? 1 : 0);
        }
        if (!strcmp(mode, "save"))
            for (size_t b = 0; b < n; b += 8)
                blocks[b][0]++;
        int st;
        waitpid(pid, &st, 0);
        t[i] = now_us() - t0;
    }
    qsort(t, (size_t)iter, sizeof *t, cmp);
    printf("%.0f\n", t[iter / 2]);
    return 0;
}
