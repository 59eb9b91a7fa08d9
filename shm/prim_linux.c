/* prim_linux.c — Linux implementation of prim.h: POSIX shm, mmap with
 * MAP_FIXED_NOREPLACE, fallocate for commit/punch, futexes, flock,
 * SO_PEERCRED. The only file that includes OS headers for these. */
#define _GNU_SOURCE
#include "prim.h"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <unwind.h>
#include <grp.h>
#include <pwd.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#include <sys/auxv.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

tcm_handle_t tcm__shm_create(const char *name, uint64_t size, unsigned mode)
{
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, (mode_t)mode);
    if (fd < 0)
        return -errno;
    if (fchmod(fd, (mode_t)mode) != 0 || ftruncate(fd, (off_t)size) != 0) {
        int err = -errno;
        close(fd);
        shm_unlink(name);
        return err;
    }
    return fd;
}

int tcm__shm_cut(tcm_handle_t fd, uint64_t size)
{
    return ftruncate(fd, (off_t)size) == 0 ? 0 : -errno;
}

tcm_handle_t tcm__shm_open(const char *name, bool writable)
{
    int fd = shm_open(name, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC, 0);
    return fd < 0 ? -errno : fd;
}

int tcm__shm_unlink(const char *name)
{
    return shm_unlink(name) == 0 ? 0 : -errno;
}

int tcm__path_share(const char *path, tcm_gid_t gid, unsigned mode)
{
    if (chown(path, (uid_t)-1, gid) != 0 || chmod(path, (mode_t)mode) != 0)
        return -errno;
    return 0;
}

int tcm__group_id(const char *name, tcm_gid_t *gid)
{
    char *end;
    unsigned long v = strtoul(name, &end, 10);
    if (*name && !*end) {
        *gid = (gid_t)v;
        return 0;
    }
    struct group *g = getgrnam(name);
    if (!g)
        return -ENOENT;
    *gid = g->gr_gid;
    return 0;
}

int tcm__user_id(const char *name, uint32_t *uid)
{
    char *end;
    unsigned long v = strtoul(name, &end, 10);
    if (*name && !*end && v <= UINT32_MAX) {
        *uid = (uint32_t)v;
        return 0;
    }
    struct passwd *p = getpwnam(name);
    if (!p)
        return -ENOENT;
    *uid = p->pw_uid;
    return 0;
}

void tcm__close(tcm_handle_t fd)
{
    if (fd >= 0)
        close(fd);
}

/* Find what already occupies [lo, hi) in this process, for the message. */
static void describe_clash(uintptr_t lo, uintptr_t hi, char *err, size_t errlen)
{
    FILE *f = fopen("/proc/self/maps", "re");
    char line[512];
    snprintf(err, errlen, "address range 0x%lx-0x%lx is already mapped in this process",
             (unsigned long)lo, (unsigned long)hi);
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        char path[256] = "";
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %255[^\n]", &a, &b, path) < 2)
            continue;
        if (a < hi && b > lo) {
            snprintf(err, errlen,
                     "heap range 0x%lx-0x%lx clashes with existing mapping 0x%lx-0x%lx %s "
                     "(start tcmd with another --base)",
                     (unsigned long)lo, (unsigned long)hi, a, b, path[0] ? path : "[anon]");
            break;
        }
    }
    fclose(f);
}

void *tcm__map(tcm_handle_t fd, uint64_t size, void *at, bool writable, char *err, size_t errlen)
{
    int prot = PROT_READ | (writable ? PROT_WRITE : 0);
    int flags = MAP_SHARED | (at ? MAP_FIXED_NOREPLACE : 0);
    void *p = mmap(at, (size_t)size, prot, flags, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        if (at && e == EEXIST)
            describe_clash((uintptr_t)at, (uintptr_t)at + size, err, errlen);
        else
            snprintf(err, errlen, "mmap(%p, %llu) failed: %s", at, (unsigned long long)size,
                     strerror(e));
        errno = e;
        return NULL;
    }
    if (at && p != at) { /* kernels before 4.17 ignore the flag */
        munmap(p, (size_t)size);
        describe_clash((uintptr_t)at, (uintptr_t)at + size, err, errlen);
        errno = EEXIST;
        return NULL;
    }
    return p;
}

void tcm__unmap(void *p, uint64_t size)
{
    if (p)
        munmap(p, (size_t)size);
}

void *tcm__reserve(uint64_t size)
{
    void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

int tcm__commit(tcm_handle_t fd, uint64_t off, uint64_t len)
{
    if (fallocate(fd, 0, (off_t)off, (off_t)len) == 0)
        return 0;
    return errno == ENOSPC ? -ENOMEM : -errno;
}

int tcm__release(tcm_handle_t fd, uint64_t off, uint64_t len)
{
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) == 0)
        return 0;
    return -errno;
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

int tcm__collapse(void *addr, uint64_t len)
{
    return madvise(addr, (size_t)len, MADV_COLLAPSE) == 0 ? 0 : -errno;
}

int64_t tcm__huge_mapped_bytes(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "re");
    if (!f)
        return -errno;
    char line[512];
    bool in = false;
    int64_t kb = -ENOENT;
    /* the mappings come in address order, and the kernel measures each as
     * it is read: stop at the heap's */
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line ("Anonymous:" is not) */
            if (in)
                break;
            in = lo == (uintptr_t)addr;
            continue;
        }
        long long v;
        if (in && sscanf(line, "ShmemPmdMapped: %lld kB", &v) == 1) {
            kb = v;
            break;
        }
    }
    fclose(f);
    return kb < 0 ? kb : kb * 1024;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int tcm__populate(void *addr, uint64_t len)
{
    uintptr_t lo = (uintptr_t)addr & ~(uintptr_t)4095;
    uintptr_t hi = ((uintptr_t)addr + len + 4095) & ~(uintptr_t)4095;
    if (hi <= lo || madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) == 0)
        return 0;
    return errno == EINVAL ? 0 : -errno; /* kernels before 5.14: nothing to check with */
}

int tcm__discard(void *addr, uint64_t len)
{
    return madvise(addr, (size_t)len, MADV_DONTNEED) == 0 ? 0 : -errno;
}

bool tcm__released_reads_zero(void)
{
    return true;
}

int64_t tcm__backed_bytes(tcm_handle_t fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    return (int64_t)st.st_blocks * 512;
}

int64_t tcm__resident_bytes(const void *addr, uint64_t len)
{
    size_t sys_page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)addr & ~(uintptr_t)(sys_page - 1), hi = (uintptr_t)addr + len;
    unsigned char vec[256];
    int64_t total = 0;
    for (uintptr_t a = lo; a < hi;) {
        size_t n = (hi - a + sys_page - 1) / sys_page;
        if (n > sizeof vec)
            n = sizeof vec;
        if (mincore((void *)a, n * sys_page, vec) != 0)
            return -errno;
        for (size_t i = 0; i < n; i++)
            total += (vec[i] & 1) ? (int64_t)sys_page : 0;
        a += n * sys_page;
    }
    return total;
}

int tcm__backed_range(tcm_handle_t fd, uint64_t off, uint64_t len)
{
    off_t hole = lseek(fd, (off_t)off, SEEK_HOLE);
    if (hole < 0)
        return -errno;
    return (uint64_t)hole >= off + len ? 1 : 0;
}

int tcm__shm_stat(tcm_handle_t fd, uint64_t *size, tcm_uid_t *uid, unsigned *mode)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    *size = (uint64_t)st.st_size;
    *uid = st.st_uid;
    *mode = (unsigned)st.st_mode & 07777;
    return 0;
}

int tcm__wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
    struct timespec ts, *tsp = NULL;
    if (timeout_ns >= 0) {
        ts.tv_sec = timeout_ns / 1000000000;
        ts.tv_nsec = timeout_ns % 1000000000;
        tsp = &ts;
    }
    long r = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, tsp, NULL, 0);
    return r == 0 ? 0 : -errno;
}

void tcm__wake(_Atomic uint32_t *word, int n)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, n, NULL, NULL, 0);
}

tcm_handle_t tcm__lock_name(const char *name)
{
    int fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno == EWOULDBLOCK ? -EBUSY : -errno;
        close(fd);
        return err;
    }
    return fd;
}

/* Fields 3 (state) and 22 (start, in clock ticks since boot) of the
 * stat file of a /proc/PID directory (dirfd) or of /proc/PID (dirfd -1).
 * The command name (field 2) may hold spaces and parentheses, so the count
 * starts after its last ')'. */
static int proc_stat(int dirfd, tcm_pid_t pid, char *state, uint64_t *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = dirfd >= 0 ? openat(dirfd, "stat", O_RDONLY | O_CLOEXEC) : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == ESRCH ? -ESRCH : -errno;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int err = n < 0 ? -errno : 0;
    close(fd);
    if (err)
        return err == -ESRCH ? -ESRCH : err;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || !p[2])
        return -EPROTO;
    *state = p[2];
    for (int field = 2; field < 22 && p; field++)
        p = strchr(p + 1, ' ');
    if (!p)
        return -EPROTO;
    *start = strtoull(p + 1, NULL, 10);
    return 0;
}

/* Kernels before 5.3 (and sandboxes whose seccomp filter refuses the call,
 * and valgrind up to 3.20, which bench/run_daemon_cost.sh runs tcmd under)
 * have no pidfd_open: the watch is then a descriptor of the /proc/PID
 * directory, which keeps naming that process even once its pid is reused
 * (its files read ESRCH when it has gone). It cannot be polled; tcmd's
 * liveness timer asks it every second. Set once, by the first watch. */
static _Atomic bool proc_watch_by_dir;

/* The pidfd first, then the start time: a pid reused between the two
 * leaves a pidfd of the process that ended, which reads as exited. */
tcm_handle_t tcm__proc_watch(tcm_pid_t pid, uint64_t *start)
{
    if (pid <= 0)
        return -ESRCH;
    int fd = -1;
    if (!atomic_load_explicit(&proc_watch_by_dir, memory_order_relaxed)) {
        fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
        if (fd < 0 && errno != ENOSYS && errno != EPERM)
            return -errno;
        if (fd < 0)
            atomic_store_explicit(&proc_watch_by_dir, true, memory_order_relaxed);
    }
    if (fd < 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d", (int)pid);
        fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
            return errno == ENOENT ? -ESRCH : -errno;
    }
    char state;
    int err = proc_stat(-1, pid, &state, start);
    if (err) {
        close(fd);
        return err;
    }
    return fd;
}

/* The process decides how long its maps are: past this many lines the
 * answer is "cannot tell" (a fresh exec'd image has a few hundred). */
#define MAPS_LINES_MAX 8192

int tcm__proc_maps_shm(tcm_pid_t pid, const char *shm_name)
{
    char path[64], want[160], line[4096];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    int n = snprintf(want, sizeof want, "/dev/shm%s", shm_name), lines = 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return errno == ENOENT ? -ESRCH : -errno;
    int found = 0;
    while (!found && lines++ < MAPS_LINES_MAX && fgets(line, sizeof line, f)) {
        char *p = strchr(line, '/');
        if (p && !strncmp(p, want, (size_t)n) && (p[n] == 0 || p[n] == '\n' || p[n] == ' '))
            found = 1;
    }
    int err = ferror(f) ? -EIO : !found && lines > MAPS_LINES_MAX ? -E2BIG : 0;
    fclose(f);
    return err ? err : found;
}

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5 */
#endif

/* The connecting process itself, where the kernel can say (SO_PEERPIDFD):
 * its pid cannot have been reused between connect() and now. Its start
 * time is read from the pid, then the pidfd is asked whether that process
 * still runs (while it does, the pid is its). */
tcm_handle_t tcm__peer_proc_watch(tcm_handle_t sockfd, tcm_pid_t pid, uint64_t *start)
{
    int fd = -1;
    socklen_t len = sizeof fd;
    if (atomic_load_explicit(&proc_watch_by_dir, memory_order_relaxed) ||
        getsockopt(sockfd, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) != 0 || fd < 0)
        return tcm__proc_watch(pid, start);
    char state;
    int err = proc_stat(-1, pid, &state, start);
    if (!err && tcm__proc_exited(fd))
        err = -ESRCH;
    if (err) {
        close(fd);
        return err;
    }
    return fd;
}

void tcm__proc_names(tcm_pid_t pid, char *comm, size_t commlen, char *exe, size_t exelen)
{
    char path[64], buf[PATH_MAX];
    comm[0] = exe[0] = 0;
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n > 0) {
            buf[n] = 0;
            buf[strcspn(buf, "\n")] = 0;
            snprintf(comm, commlen, "%s", buf);
        }
    }
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(path, buf, sizeof buf - 1);
    if (n > 0 && exelen) {
        buf[n] = 0;
        size_t keep = (size_t)n < exelen - 1 ? (size_t)n : exelen - 1;
        memcpy(exe, buf + n - keep, keep + 1);
    }
    /* the process chose both (prctl, the file's name): no control
     * character reaches a log line or a table through them */
    for (char *c = comm; *c; c++)
        *c = (unsigned char)*c < 0x20 || *c == 0x7f ? '?' : *c;
    for (char *c = exe; *c; c++)
        *c = (unsigned char)*c < 0x20 || *c == 0x7f ? '?' : *c;
}

/* Whether a thread of the process (a /proc/PID directory) is still
 * running: its main thread may have ended (pthread_exit) and wait as a
 * zombie while the others go on, as a pidfd knows. */
static bool proc_thread_left(int dirfd)
{
    int tfd = openat(dirfd, "task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = tfd >= 0 ? fdopendir(tfd) : NULL;
    if (!dir) {
        if (tfd >= 0)
            close(tfd);
        return false;
    }
    bool left = false;
    for (struct dirent *e; !left && (e = readdir(dir)) != NULL;) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        int one = openat(tfd, e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        char state;
        uint64_t start;
        left = one >= 0 && proc_stat(one, 0, &state, &start) == 0 && state != 'Z' && state != 'X';
        if (one >= 0)
            close(one);
    }
    closedir(dir);
    return left;
}

bool tcm__proc_exited(tcm_handle_t watch)
{
    if (watch < 0)
        return true;
    if (atomic_load_explicit(&proc_watch_by_dir, memory_order_relaxed)) {
        char state;
        uint64_t start;
        int err = proc_stat(watch, 0, &state, &start);
        if (err == -ESRCH)
            return true;
        return !err && (state == 'Z' || state == 'X') && !proc_thread_left(watch);
    }
    struct pollfd pfd = {.fd = watch, .events = POLLIN};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL));
}

bool tcm__proc_watch_pollable(void)
{
    return !atomic_load_explicit(&proc_watch_by_dir, memory_order_relaxed);
}

int tcm__file_id(tcm_handle_t fd, tcm_file_id_t *id)
{
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return fd < 0 ? -EBADF : -errno;
    id->dev = (uint64_t)st.st_dev;
    id->ino = (uint64_t)st.st_ino;
    return 0;
}

bool tcm__file_is(tcm_handle_t fd, const tcm_file_id_t *id)
{
    tcm_file_id_t now = {0, 0};
    return tcm__file_id(fd, &now) == 0 && now.dev == id->dev && now.ino == id->ino;
}

/* The zones are read by the signal handler on any thread: each is
 * published by its hi bound (release) and withdrawn by clearing it first. */
#define FAULT_ZONES 2048
static struct fault_zone {
    _Atomic uintptr_t lo, hi;
    _Atomic uint32_t *_Atomic tripped;
} fault_zones[FAULT_ZONES];
static pthread_mutex_t fault_zones_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    uintptr_t addr = (uintptr_t)si->si_addr;
    (void)uc;
    for (unsigned i = 0; i < FAULT_ZONES; i++) {
        uintptr_t hi = atomic_load_explicit(&fault_zones[i].hi, memory_order_acquire);
        uintptr_t lo = atomic_load_explicit(&fault_zones[i].lo, memory_order_relaxed);
        if (!hi || addr < lo || addr >= hi)
            continue;
        /* the raw system call: no sanitizer interceptor runs in a signal handler */
        long r = syscall(SYS_mmap, (void *)lo, hi - lo, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (r == -1)
            break;
        _Atomic uint32_t *tripped = atomic_load(&fault_zones[i].tripped);
        if (tripped)
            atomic_store(tripped, 1);
        return; /* the access runs again, on zeros */
    }
    signal(sig, SIG_DFL); /* not ours to excuse: die of it as before */
}

int tcm__fault_zones_init(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGBUS, &sa, NULL) == 0 ? 0 : -errno;
}

int tcm__fault_zone_add(void *lo, uint64_t len, _Atomic uint32_t *tripped)
{
    int id = -ENOSPC;
    pthread_mutex_lock(&fault_zones_lock);
    for (unsigned i = 0; i < FAULT_ZONES; i++) {
        if (atomic_load(&fault_zones[i].hi))
            continue;
        atomic_store(&fault_zones[i].lo, (uintptr_t)lo);
        atomic_store(&fault_zones[i].tripped, tripped);
        atomic_store_explicit(&fault_zones[i].hi, (uintptr_t)lo + len, memory_order_release);
        id = (int)i;
        break;
    }
    pthread_mutex_unlock(&fault_zones_lock);
    return id;
}

void tcm__fault_zone_remove(int id)
{
    if (id < 0 || id >= FAULT_ZONES)
        return;
    pthread_mutex_lock(&fault_zones_lock);
    atomic_store(&fault_zones[id].hi, 0);
    atomic_store(&fault_zones[id].tripped, NULL);
    pthread_mutex_unlock(&fault_zones_lock);
}

int tcm__read_at(tcm_handle_t fd, const void *mapped, uint64_t off, void *buf, uint64_t len)
{
    uint8_t *p = buf;
    (void)mapped;
    while (len) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0) { /* past the end: the object was shrunk */
            memset(p, 0, len);
            return 0;
        }
        p += n;
        off += (uint64_t)n;
        len -= (uint64_t)n;
    }
    return 0;
}

int tcm__peer_cred(tcm_handle_t sockfd, tcm_pid_t *pid, tcm_uid_t *uid, tcm_gid_t *gid)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(sockfd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return -errno;
    *pid = cred.pid;
    *uid = cred.uid;
    *gid = cred.gid;
    return 0;
}

int tcm__keep_alive_in(tcm_handle_t fd, tcm_pid_t pid)
{
    (void)fd, (void)pid;
    return 0;
}

tcm_pid_t tcm__detach(tcm_handle_t log_fd, tcm_handle_t *ready)
{
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int err = -errno;
        close(pipefd[0]);
        close(pipefd[1]);
        return err;
    }
    if (pid > 0) {
        close(pipefd[1]);
        char c;
        ssize_t n;
        do
            n = read(pipefd[0], &c, 1);
        while (n < 0 && errno == EINTR);
        close(pipefd[0]);
        return n == 1 ? pid : -ECHILD;
    }
    close(pipefd[0]);
    setsid();
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(log_fd, 2);
        close(null);
    }
    *ready = pipefd[1];
    return 0;
}

void tcm__detach_ready(tcm_handle_t ready)
{
    (void)!write(ready, "k", 1);
    close(ready);
}

uint64_t tcm__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t tcm__thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool tcm__socket_hung_up(tcm_handle_t sockfd)
{
    struct pollfd pfd = {.fd = sockfd, .events = POLLIN | POLLRDHUP};
    if (sockfd < 0)
        return true;
    if (poll(&pfd, 1, 0) <= 0)
        return false;
    if (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))
        return true;
    char c;
    return recv(sockfd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

bool tcm__peer_in_group(tcm_handle_t sockfd, tcm_gid_t primary, tcm_gid_t gid)
{
    if (primary == gid)
        return true;
    gid_t groups[256];
    socklen_t len = sizeof groups;
    if (getsockopt(sockfd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0)
        return false;
    for (size_t i = 0; i < len / sizeof groups[0]; i++)
        if (groups[i] == gid)
            return true;
    return false;
}

bool tcm__handles_travel(void)
{
    return true;
}

int tcm__send_with_fds(tcm_handle_t sockfd, const void *buf, size_t len, const tcm_handle_t *fds, int nfds)
{
    union {
        char space[CMSG_SPACE(sizeof(int) * 8)];
        struct cmsghdr align;
    } control;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 8)
        return -EINVAL;
    if (nfds > 0) {
        memset(&control, 0, sizeof control);
        msg.msg_control = control.space;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t n = sendmsg(sockfd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0)
        return -errno;
    return (size_t)n == len ? 0 : -EAGAIN;
}

long tcm__recv_with_fds(tcm_handle_t sockfd, void *buf, size_t len, tcm_handle_t *fds, int maxfds, int *nfds)
{
    union {
        char space[CMSG_SPACE(sizeof(int) * 8)];
        struct cmsghdr align;
    } control;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                         .msg_controllen = sizeof control.space};
    ssize_t n;
    do
        n = recvmsg(sockfd, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int got[8];
        memcpy(got, CMSG_DATA(cm), (k > 8 ? 8 : k) * sizeof(int));
        for (size_t i = 0; i < k && i < 8; i++) {
            if (*nfds < maxfds)
                fds[(*nfds)++] = got[i];
            else
                close(got[i]);
        }
    }
    return (long)n;
}

int tcm__send_all(tcm_handle_t sockfd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t w = send(sockfd, p, len, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int tcm__recv_all(tcm_handle_t sockfd, void *buf, size_t len, int timeout_ms, tcm_handle_t *fds, int maxfds, int *nfds)
{
    uint8_t *p = buf;
    int none = 0;
    if (!fds)
        maxfds = 0, nfds = &none;
    while (len) {
        struct pollfd pfd = {.fd = sockfd, .events = POLLIN};
        int r = poll(&pfd, 1, timeout_ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return -ETIMEDOUT;
        long got = tcm__recv_with_fds(sockfd, p, len, fds, maxfds, nfds);
        if (got == -EINTR || got == -EAGAIN)
            continue;
        if (got < 0)
            return (int)got;
        if (got == 0)
            return -ECONNRESET;
        p += got;
        len -= (size_t)got;
    }
    return 0;
}

/* A unix stream socket and the address of path; fd or -errno. */
static int unix_socket(const char *path, struct sockaddr_un *sa)
{
    *sa = (struct sockaddr_un){.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa->sun_path)
        return -ENAMETOOLONG;
    strcpy(sa->sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    return fd < 0 ? -errno : fd;
}

int tcm__socket_bind_name(const char *path, char *out, size_t len)
{
    if (snprintf(out, len, "%s.new", path) >= (int)len)
        return -ENAMETOOLONG;
    unlink(out); /* a previous tcmd's, killed between bind and rename */
    return 0;
}

int tcm__socket_publish(const char *bound, const char *path)
{
    return rename(bound, path) == 0 ? 0 : -errno;
}

tcm_handle_t tcm__connect(const char *path)
{
    struct sockaddr_un sa;
    int fd = unix_socket(path, &sa);
    if (fd < 0)
        return fd;
    /* an AF_UNIX connect to a full backlog sleeps for the send timeout */
    struct timeval tv = {TCM_CONNECT_TIMEOUT_MS / 1000, TCM_CONNECT_TIMEOUT_MS % 1000 * 1000}, none = {0, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int err = errno == EAGAIN || errno == EINPROGRESS ? -ETIMEDOUT : -errno;
        close(fd);
        return err;
    }
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
    return fd;
}

int tcm__socket_placeholder(const char *path)
{
    struct sockaddr_un sa;
    int fd = unix_socket(path, &sa);
    if (fd < 0)
        return fd;
    unlink(path);
    mode_t old = umask(0077);
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 ? 0 : -errno;
    umask(old);
    close(fd);
    return rc;
}

uint64_t tcm__random64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
        v = tcm__now_ns() ^ ((uint64_t)getpid() << 32);
    return v;
}

void tcm__sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void tcm__wall_clock(char *buf, size_t len)
{
    struct timespec ts;
    struct tm tm;
    char day[24];
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    strftime(day, sizeof day, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(buf, len, "%s.%03ld", day, ts.tv_nsec / 1000000);
}

void tcm__format_time(uint64_t secs, char *buf, size_t len)
{
    time_t t = (time_t)secs;
    struct tm tm;
    strftime(buf, len, "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
}

uint32_t tcm__pid(void)
{
    return (uint32_t)getpid();
}

tcm_uid_t tcm__uid(void)
{
    return (uint32_t)geteuid();
}

tcm_uid_t tcm__login_uid(void)
{
    return (uint32_t)getuid();
}

bool tcm__secure_exec(void)
{
    return getauxval(AT_SECURE) != 0;
}

const char *tcm__env(const char *name)
{
    return secure_getenv(name);
}

int tcm__read_root_file(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    int err = fstat(fd, &st) != 0 ? -errno : !S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022) ? -EPERM : 0;
    ssize_t n = err ? 0 : read(fd, buf, len - 1);
    if (!err && n < 0)
        err = -errno;
    close(fd);
    buf[err ? 0 : n] = 0;
    return err;
}

int tcm__absolute_path(const char *path, char *out, size_t len)
{
    char buf[PATH_MAX];
    if (!realpath(path, buf))
        return -errno;
    if (snprintf(out, len, "%s", buf) >= (int)len)
        return -ENAMETOOLONG;
    return 0;
}

void tcm__yield(void)
{
    sched_yield();
}

uint64_t tcm__thread_id(void)
{
    return (uint64_t)syscall(SYS_gettid);
}

/* On Linux a nice value belongs to a thread: setpriority on its tid. */
int tcm__thread_set_nice(uint64_t tid, int nice)
{
    return setpriority(PRIO_PROCESS, (id_t)tid, nice) == 0 ? 0 : -errno;
}

bool tcm__is_terminal(tcm_handle_t fd)
{
    return isatty(fd) == 1;
}

int tcm__unlink(const char *path)
{
    return unlink(path) == 0 || errno == ENOENT ? 0 : -errno;
}

int tcm__make_dirs(const char *dir, unsigned mode)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return -ENAMETOOLONG;
    for (char *p = path + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            mkdir(path, (mode_t)mode);
            *p = '/';
        }
    }
    if (mkdir(path, (mode_t)mode) == 0)
        return 1;
    return errno == EEXIST ? 0 : -errno;
}

unsigned tcm__umask(unsigned mask)
{
    return (unsigned)umask((mode_t)mask);
}

void tcm__ignore_sigpipe(void)
{
    signal(SIGPIPE, SIG_IGN);
}

void tcm__stop_signals_hold(bool hold)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(hold ? SIG_BLOCK : SIG_UNBLOCK, &set, NULL);
}

int tcm__at_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
    return -pthread_atfork(prepare, parent, child);
}

void *tcm__next_symbol(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

void *tcm__loaded_symbol(const char *library, const char *name)
{
    void *lib = dlopen(library, RTLD_LAZY | RTLD_NOLOAD);
    if (!lib)
        return NULL;
    void *f = dlsym(lib, name);
    dlclose(lib); /* the reference RTLD_NOLOAD took: the library stays with its other users */
    return f;
}

size_t tcm__os_page_size(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* ---- the heap profile's stacks and mappings ---- */

/* The executable segments of the shared object this code is in; empty
 * when it is in the program itself (libtcm.a), whose frames are the
 * program's. */
static uintptr_t own_lo, own_hi;
static pthread_once_t own_once = PTHREAD_ONCE_INIT;

static int find_own(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size, (void)arg;
    uintptr_t me = (uintptr_t)&tcm__backtrace;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && me >= lo && me < hi) {
            if (info->dlpi_name && info->dlpi_name[0]) { /* the program's own has no name */
                own_lo = lo;
                own_hi = hi;
            }
            return 1;
        }
    }
    return 0;
}

static void own_range(void)
{
    dl_iterate_phdr(find_own, NULL);
}

typedef struct unwinding {
    uint64_t *frames;
    unsigned n, max;
    uintptr_t above;
} unwinding_t;

static _Unwind_Reason_Code frame(struct _Unwind_Context *ctx, void *arg)
{
    unwinding_t *u = arg;
    uintptr_t ip = _Unwind_GetIP(ctx);
    if (!ip)
        return _URC_END_OF_STACK;
    /* the CFA the unwinder gives with a frame's IP is that of the frame it
     * returns from: the library's outermost frame gives `above` with the
     * first of its caller's */
    if (_Unwind_GetCFA(ctx) < u->above || (ip >= own_lo && ip < own_hi))
        return _URC_NO_REASON;
    u->frames[u->n++] = ip;
    return u->n < u->max ? _URC_NO_REASON : _URC_END_OF_STACK;
}

unsigned tcm__backtrace(uint64_t *frames, unsigned max, uintptr_t above)
{
    pthread_once(&own_once, own_range);
    unwinding_t u = {frames, 0, max, above};
    if (max)
        _Unwind_Backtrace(frame, &u);
    return u.n;
}

typedef struct maps_text {
    char *buf;
    size_t len, used;
} maps_text_t;

/* The text is written by hand, not with snprintf: a process's first
 * snprintf costs tens of microseconds (its first sample's), and
 * readlink(/proc/self/exe) as much again: the program's own object is
 * named TCM_MAPS_PROGRAM instead. */
static const char hex_digits[] = "0123456789abcdef";

static char *put_hex(char *out, uint64_t v)
{
    char tmp[16];
    int n = 0;
    do
        tmp[n++] = hex_digits[v & 15];
    while (v >>= 4);
    while (n)
        *out++ = tmp[--n];
    *out++ = ' ';
    return out;
}

static char *put_str(char *out, const char *s)
{
    size_t n = strlen(s);
    memcpy(out, s, n);
    return out + n;
}

/* The GNU build ID of an object, in hex ("-" without one). */
static void build_id(const struct dl_phdr_info *info, char *out, size_t outlen)
{
    out[0] = '-', out[1] = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            const uint8_t *name = p + sizeof *nh, *desc = name + ((nh->n_namesz + 3) & ~3u);
            if (desc + nh->n_descsz > end)
                break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(name, "GNU", 4) &&
                nh->n_descsz * 2 < outlen) {
                for (uint32_t k = 0; k < nh->n_descsz; k++) {
                    out[2 * k] = hex_digits[desc[k] >> 4];
                    out[2 * k + 1] = hex_digits[desc[k] & 15];
                }
                out[2 * nh->n_descsz] = 0;
                return;
            }
            p = desc + ((nh->n_descsz + 3) & ~3u);
        }
    }
}

static int add_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    maps_text_t *t = arg;
    char id[64], line[PATH_MAX + 192];
    const char *name = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : TCM_MAPS_PROGRAM;
    if (strlen(name) >= PATH_MAX || strchr(name, '\n') || strchr(name, ' '))
        return 0;
    build_id(info, id, sizeof id);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        char *e = put_hex(line, lo);
        e = put_hex(e, lo + ph->p_memsz);
        e = put_hex(e, ph->p_offset);
        e = put_hex(e, info->dlpi_addr);
        e = put_str(e, id);
        *e++ = ' ';
        e = put_str(e, name);
        *e++ = '\n';
        size_t n = (size_t)(e - line);
        if (n < t->len - t->used) {
            memcpy(t->buf + t->used, line, n);
            t->used += n;
        }
    }
    return 0;
}

size_t tcm__code_maps(char *buf, size_t len)
{
    maps_text_t t = {buf, len, 0};
    if (len)
        dl_iterate_phdr(add_object, &t);
    return t.used;
}

static int count_objects(struct dl_phdr_info *info, size_t size, void *arg)
{
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs)
        *(uint64_t *)arg = (uint64_t)info->dlpi_adds * 0x100000001ull + info->dlpi_subs;
    return 1;
}

bool tcm__is_regular_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

uint64_t tcm__code_maps_gen(void)
{
    uint64_t gen = 0;
    dl_iterate_phdr(count_objects, &gen);
    return gen;
}

bool tcm__path_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

int tcm__thread_start_quiet(pthread_t *t, void *(*fn)(void *), void *arg, const char *name)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err)
        return -err;
    tcm__thread_name(*t, name);
    return 0;
}

void tcm__thread_name(pthread_t t, const char *name)
{
    pthread_setname_np(t, name);
}

void tcm__kill_self(void)
{
    kill(getpid(), SIGKILL);
    _exit(137);
}

int tcm__shm_unlink_prefix(const char *prefix)
{
    /* POSIX has no way to list shm objects; on Linux they are /dev/shm files */
    const char *p = prefix[0] == '/' ? prefix + 1 : prefix;
    DIR *d = opendir("/dev/shm");
    int n = 0;
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, p, strlen(p)) == 0) {
            char name[300];
            snprintf(name, sizeof name, "/%s", e->d_name);
            if (shm_unlink(name) == 0)
                n++;
        }
    }
    closedir(d);
    return n;
}

/* ---- descriptor limit (issue 20: bounded resources) ---- */

int tcm__fd_limit_raise(uint64_t want, uint64_t *now)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0)
        return -errno;
    *now = r.rlim_cur;
    if (r.rlim_cur != RLIM_INFINITY && r.rlim_cur < want) {
        r.rlim_cur = r.rlim_max != RLIM_INFINITY && r.rlim_max < want ? r.rlim_max : want;
        if (setrlimit(RLIMIT_NOFILE, &r) != 0)
            return -errno;
        *now = r.rlim_cur;
    }
    if (*now == RLIM_INFINITY)
        *now = UINT64_MAX;
    return 0;
}

/* ---- Runtime directory and files: who may have put them there ----------- */

int tcm__dir_stat(const char *path, tcm_uid_t *uid, tcm_gid_t *gid, unsigned *mode)
{
    /* the answer is about the directory itself, never where a link there
     * points: O_NOFOLLOW, then fstat of what was opened (O_PATH: a client
     * of --allow-group may only search tcmd's directory, not read it) */
    int fd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        int err = -errno; /* a link gives ENOTDIR: tell it apart, for the message only */
        return err == -ENOTDIR && lstat(path, &st) == 0 && S_ISLNK(st.st_mode) ? -ELOOP : err;
    }
    int rc = fstat(fd, &st) == 0 ? 0 : -errno;
    close(fd);
    if (rc == 0) {
        *uid = st.st_uid;
        *gid = st.st_gid;
        *mode = (unsigned)st.st_mode & 07777;
    }
    return rc;
}

int tcm__log_file_open(const char *path, bool devices_too, FILE **out, tcm_uid_t *owner)
{
    for (int tries = 0; tries < 3; tries++) {
        /* O_EXCL: a new file is this one, never a link's target */
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
        if (fd < 0 && errno == EEXIST) {
            /* non-blocking: a FIFO put there must not hold tcmd's start */
            fd = open(path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
            if (fd < 0 && errno == ENOENT)
                continue; /* removed in between: create it */
        }
        if (fd < 0)
            return -errno;
        struct stat st = {.st_uid = (uid_t)-1};
        int rc = 0;
        if (fstat(fd, &st) != 0)
            rc = -errno;
        else if (S_ISREG(st.st_mode) ? st.st_uid != geteuid() : !(devices_too && (S_ISCHR(st.st_mode) ||
                                                                                  S_ISFIFO(st.st_mode))))
            rc = S_ISREG(st.st_mode) ? -EPERM : -EINVAL;
        else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
            rc = -errno;
        FILE *f = rc ? NULL : fdopen(fd, "a");
        if (!rc && !f)
            rc = -errno;
        if (rc) {
            *owner = st.st_uid;
            close(fd);
            return rc;
        }
        *out = f;
        return 0;
    }
    return -ENOENT;
}
