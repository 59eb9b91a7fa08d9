// boost_shm.cpp — tcm-bench-boost: the Boost.Interprocess baseline for the
// multi-process cases, with managed_shared_memory and its default allocator
// (rbtree_best_fit guarded by an interprocess mutex), as a multi-process
// server uses it today.
//
//   handoff  one process allocates SIZE-byte objects, writes the first byte
//            and passes their offsets in the segment through an SPSC ring;
//            another reads the byte and frees them. Same ring, backoff,
//            warm-up (65536 pairs) and barriers as bench/handoff.c.
//   seed     K processes run the seed workload (allocate BATCH objects,
//            write the first byte of each, free them all) on the one
//            segment; warm-up min(4096, PAIRS) per process, then a barrier.
//
// The segment, created before fork, is inherited by the workers. Timing as
// in the other harnesses: the parent takes the time around the go and done
// barriers; 5 runs, median, min and max.
//
// CSV: handoff: boost,procs,SIZE,PAIRS,median_s,min_s,max_s,mpairs_per_s
//      seed:    boost,SIZE,PROCS,BATCH,PAIRS,median_s,min_s,max_s,mpairs_per_s
#include <boost/interprocess/managed_shared_memory.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <sched.h>
#include <string>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <vector>

#include "util.h"

namespace bip = boost::interprocess;

namespace {

constexpr unsigned RING_CAP = 1024; // as in handoff.c
constexpr int MAX_RUNS = 64;
constexpr int MAX_PROCS = 256;

struct Shared {
    alignas(64) std::atomic<uint64_t> head;
    alignas(64) std::atomic<uint64_t> tail;
    alignas(64) pthread_barrier_t ready, go, done;
    std::atomic<int> failed;
    std::atomic<uint64_t> checksum;
    double proc_s[MAX_PROCS]; // each seed process's own time, go to its end
    bip::managed_shared_memory::handle_t slot[RING_CAP];
};

Shared *sh;
bip::managed_shared_memory *seg;
unsigned timeout_s = 300;

double now()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

void backoff(unsigned *spins)
{
    if (++*spins < 256)
        __builtin_ia32_pause();
    else
        sched_yield();
}

void *seg_alloc(size_t size)
{
    try {
        return seg->allocate(size);
    } catch (const bip::bad_alloc &) {
        sh->failed = 1;
        return nullptr;
    }
}

void produce(size_t size, uint64_t n)
{
    uint64_t tail = sh->tail.load(std::memory_order_relaxed);
    uint64_t head = sh->head.load(std::memory_order_acquire);
    for (uint64_t i = 0; i < n; i++) {
        char *p = static_cast<char *>(seg_alloc(size));
        if (!p)
            return;
        p[0] = char(i);
        for (unsigned spins = 0; tail - head == RING_CAP;) {
            head = sh->head.load(std::memory_order_acquire);
            if (tail - head == RING_CAP)
                backoff(&spins);
        }
        sh->slot[tail & (RING_CAP - 1)] = seg->get_handle_from_address(p);
        sh->tail.store(++tail, std::memory_order_release);
    }
}

void consume(uint64_t n)
{
    uint64_t head = sh->head.load(std::memory_order_relaxed);
    uint64_t tail = sh->tail.load(std::memory_order_acquire);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        for (unsigned spins = 0; head == tail;) {
            tail = sh->tail.load(std::memory_order_acquire);
            if (head == tail) {
                if (sh->failed)
                    return;
                backoff(&spins);
            }
        }
        char *p = static_cast<char *>(seg->get_address_from_handle(sh->slot[head & (RING_CAP - 1)]));
        sum += static_cast<unsigned char>(p[0]);
        seg->deallocate(p);
        sh->head.store(++head, std::memory_order_release);
    }
    sh->checksum += sum;
}

// the seed loop; false if the segment ran out
bool batch_loop(size_t size, size_t batch, uint64_t pairs, std::vector<void *> &p)
{
    uintptr_t sum = 0;
    for (uint64_t done = 0; done < pairs;) {
        size_t n = pairs - done < batch ? size_t(pairs - done) : batch, got;
        for (got = 0; got < n; got++) {
            char *q = static_cast<char *>(seg_alloc(size));
            if (!q)
                break;
            q[0] = char(got);
            sum += reinterpret_cast<uintptr_t>(q);
            p[got] = q;
        }
        for (size_t i = 0; i < got; i++)
            seg->deallocate(p[i]);
        if (got < n)
            return false;
        done += n;
    }
    sh->checksum += sum;
    return true;
}

void on_alarm(int)
{
    static const char msg[] = "bench: a boost run exceeded --timeout\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(3);
}

// Forks n workers running fn(i), times them from the go to the done barrier.
template <class F> double run_procs(int n, F fn)
{
    pthread_barrierattr_t attr;
    pthread_barrierattr_init(&attr);
    pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(&sh->ready, &attr, unsigned(n) + 1);
    pthread_barrier_init(&sh->go, &attr, unsigned(n) + 1);
    pthread_barrier_init(&sh->done, &attr, unsigned(n) + 1);
    pthread_barrierattr_destroy(&attr);
    sh->head = 0;
    sh->tail = 0;
    sh->failed = 0;
    std::vector<pid_t> pid(size_t(n), 0);
    pid_t parent = getpid();
    fflush(stdout);
    for (int i = 0; i < n; i++) {
        pid[size_t(i)] = fork();
        if (pid[size_t(i)] < 0) {
            perror("bench: fork");
            exit(1);
        }
        if (pid[size_t(i)] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            alarm(0);
            fn(i);
            _exit(0);
        }
    }
    alarm(timeout_s);
    pthread_barrier_wait(&sh->ready);
    double t0 = now();
    pthread_barrier_wait(&sh->go);
    pthread_barrier_wait(&sh->done);
    double t1 = now();
    alarm(0);
    bool failed = sh->failed != 0;
    for (int i = 0; i < n; i++) {
        int status;
        waitpid(pid[size_t(i)], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "bench: boost worker %d ended with status 0x%x\n", i, status);
            failed = true;
        }
    }
    pthread_barrier_destroy(&sh->ready);
    pthread_barrier_destroy(&sh->go);
    pthread_barrier_destroy(&sh->done);
    return failed ? -1 : t1 - t0;
}

struct Stats {
    double median, min, max;
};

Stats stats(std::vector<double> t)
{
    std::sort(t.begin(), t.end());
    size_t n = t.size();
    return {n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2, t.front(), t.back()};
}

uint64_t parse_size(const char *opt, const char *s)
{
    uint64_t v;
    if (tcm__parse_size(s, &v) != 0) { // tcm's one size syntax, as the other harnesses read it
        fprintf(stderr, "bench: bad value for %s: '%s'\n", opt, s);
        exit(2);
    }
    return v;
}

void usage(FILE *f)
{
    fprintf(f, "usage: tcm-bench-boost handoff [--size S] [--pairs P] [--runs R] [--csv] [--verbose]\n"
               "       tcm-bench-boost seed [--procs K] [--size S] [--batch N] [--pairs P] [--runs R]\n"
               "                            [--csv] [--verbose]\n"
               "  common: [--segment SIZE] (default 256M) [--timeout SEC]\n"
               "  P: pairs in all for handoff, per process for seed\n");
}

} // namespace

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "handoff") != 0 && strcmp(argv[1], "seed") != 0)) {
        usage(argc > 1 && strcmp(argv[1], "--help") == 0 ? stdout : stderr);
        return argc > 1 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
    }
    bool handoff = strcmp(argv[1], "handoff") == 0, csv = false, verbose = false;
    size_t size = 64, batch = 64, segsize = size_t(256) << 20;
    uint64_t pairs = 1000000;
    int runs = 5, procs = 2;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
        auto need = [&]() {
            if (!v) {
                usage(stderr);
                exit(2);
            }
            i++;
            return v;
        };
        if (!strcmp(a, "--size")) size = parse_size(a, need());
        else if (!strcmp(a, "--batch")) batch = parse_size(a, need());
        else if (!strcmp(a, "--pairs")) pairs = parse_size(a, need());
        else if (!strcmp(a, "--runs")) runs = int(parse_size(a, need()));
        else if (!strcmp(a, "--procs")) procs = int(parse_size(a, need()));
        else if (!strcmp(a, "--segment")) segsize = parse_size(a, need());
        else if (!strcmp(a, "--timeout")) timeout_s = unsigned(parse_size(a, need()));
        else if (!strcmp(a, "--csv")) csv = true;
        else if (!strcmp(a, "--verbose")) verbose = true;
        else {
            usage(stderr);
            return 2;
        }
    }
    if (!size || !batch || !pairs || runs < 1 || runs > MAX_RUNS || procs < 1 || procs > MAX_PROCS) {
        usage(stderr);
        return 2;
    }
    signal(SIGALRM, on_alarm);
    void *m = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("bench: mmap");
        return 1;
    }
    sh = new (m) Shared();

    std::string name = "tcm-bench-boost-" + std::to_string(getpid());
    bip::shared_memory_object::remove(name.c_str());
    int rc = 0;
    try {
        bip::managed_shared_memory segment(bip::create_only, name.c_str(), segsize);
        seg = &segment;
        std::vector<double> t;
        for (int r = 0; r < runs; r++) {
            double s;
            if (handoff) {
                uint64_t warm = std::min<uint64_t>(pairs, 65536);
                s = run_procs(2, [&](int i) {
                    if (i == 0)
                        produce(size, warm);
                    else
                        consume(warm);
                    pthread_barrier_wait(&sh->ready);
                    pthread_barrier_wait(&sh->go);
                    if (i == 0)
                        produce(size, pairs);
                    else
                        consume(pairs);
                    pthread_barrier_wait(&sh->done);
                });
            } else {
                s = run_procs(procs, [&](int i) {
                    std::vector<void *> p(batch);
                    bool ok = batch_loop(size, batch, std::min<uint64_t>(pairs, 4096), p);
                    pthread_barrier_wait(&sh->ready);
                    pthread_barrier_wait(&sh->go);
                    double t0 = now();
                    ok = ok && batch_loop(size, batch, pairs, p);
                    sh->proc_s[i] = now() - t0;
                    if (!ok)
                        sh->failed = 1;
                    pthread_barrier_wait(&sh->done);
                });
            }
            if (verbose)
                fprintf(stderr, "run %d boost %s: %.6f s\n", r + 1, argv[1], s);
            if (s < 0) {
                fprintf(stderr, "bench: boost %s failed (size %zu; segment %zu bytes)\n", argv[1], size, segsize);
                rc = 1;
                break;
            }
            t.push_back(s);
        }
        if (!rc) {
            Stats st = stats(t);
            if (handoff) {
                double mps = double(pairs) / st.median / 1e6;
                if (csv)
                    printf("boost,procs,%zu,%llu,%.6f,%.6f,%.6f,%.3f\n", size, (unsigned long long)pairs,
                           st.median, st.min, st.max, mps);
                else
                    printf("boost     procs    size %-6zu pairs %-9llu  median %.4f s (%.4f-%.4f)  %.2f Mpairs/s\n",
                           size, (unsigned long long)pairs, st.median, st.min, st.max, mps);
            } else {
                double mps = double(pairs) * procs / st.median / 1e6;
                if (csv)
                    printf("boost,%zu,%d,%zu,%llu,%.6f,%.6f,%.6f,%.3f\n", size, procs, batch,
                           (unsigned long long)pairs, st.median, st.min, st.max, mps);
                else
                    printf("boost     size %-6zu procs %-3d batch %-5zu pairs %-9llu  median %.4f s (%.4f-%.4f)"
                           "  %.2f Mpairs/s\n",
                           size, procs, batch, (unsigned long long)pairs, st.median, st.min, st.max, mps);
            }
        }
    } catch (const std::exception &e) {
        fprintf(stderr, "bench: boost: %s\n", e.what());
        rc = 1;
    }
    bip::shared_memory_object::remove(name.c_str());
    fflush(stdout);
    return rc;
}
