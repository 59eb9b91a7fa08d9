/* prim_win.c — Windows implementation of prim.h: named file mappings on the
 * paging file (SEC_RESERVE, committed by VirtualAlloc on a view), named
 * events for the shared-word wait, a named mutex for one daemon per name.
 * Built with mingw-w64 and tested under Wine (tests/windows/).
 *
 * What Windows does differently, and how tcm lives with it (DESIGN.md,
 * "The Windows backend"):
 * - A segment has no name in a file system: its name lasts while a handle
 *   to it is open, so "unlink" is a no-op, and tcmd leaves each client
 *   handles of no access rights to the heap's segments
 *   (tcm__keep_alive_in) so that they outlive a killed tcmd.
 * - Pages are committed through a view, so this file keeps a table of the
 *   segments this process opened and the view it mapped of each; commit,
 *   release and the backed figures of a handle go through that view (or a
 *   short-lived one when the process has none).
 * - A committed page of a section cannot be decommitted while the section
 *   exists (VirtualFree refuses mapped views). Release therefore resets
 *   the pages (MEM_RESET: their contents are dropped, never written to the
 *   paging file) and takes them out of the working set: the physical memory
 *   goes back, the commit charge stays with the segment. tcm never relies
 *   on a released page reading zero (calloc clears what it hands out).
 * - WaitOnAddress only works inside one process. A word in a shared
 *   segment is waited on with an auto-reset named event per (segment,
 *   offset); a word elsewhere (private memory) with WaitOnAddress.
 * - The control channel is a named pipe; its peer's identity comes from
 *   the pipe (client process id) and that process's token. Descriptors do
 *   not travel with frames (clients open the segments by name), and a
 *   client's liveness is its process. Detaching and --allow-group have no
 *   Windows version: they answer -ENOSYS. */
#define WIN32_LEAN_AND_MEAN
#ifndef _WIN32_WINNT
#define _WIN32_WINNT 0x0602 /* Windows 8: WaitOnAddress */
#endif
#include "prim.h"

#include <windows.h>
#include <aclapi.h>
#include <bcrypt.h>
#include <io.h>
#include <psapi.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NAME_MAX_CHARS 200

static HANDLE to_handle(tcm_handle_t h)
{
    return LongToHandle(h);
}

static tcm_handle_t from_handle(HANDLE h)
{
    return HandleToLong(h);
}

static int errno_of(DWORD err)
{
    switch (err) {
    case ERROR_ALREADY_EXISTS:
    case ERROR_FILE_EXISTS:
        return EEXIST;
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
        return ENOENT;
    case ERROR_ACCESS_DENIED:
        return EACCES;
    case ERROR_NOT_ENOUGH_MEMORY:
    case ERROR_OUTOFMEMORY:
    case ERROR_COMMITMENT_LIMIT:
    case ERROR_DISK_FULL:
        return ENOMEM;
    case ERROR_INVALID_ADDRESS:
        return EEXIST;
    case ERROR_INVALID_PARAMETER:
        return EINVAL;
    case ERROR_FILENAME_EXCED_RANGE:
        return ENAMETOOLONG;
    default:
        return EIO;
    }
}

static int last_error(void)
{
    return -errno_of(GetLastError());
}

/* "/tcm.NAME.heap" + suffix -> L"Local\\tcm.NAME.heap<suffix>": the
 * session's namespace, which a user's processes share. */
static int object_name(const char *name, const char *suffix, wchar_t *out, size_t n)
{
    char utf8[NAME_MAX_CHARS + 64];
    while (*name == '/')
        name++;
    int len = snprintf(utf8, sizeof utf8, "Local\\%s%s", name, suffix ? suffix : "");
    if (len < 0 || (size_t)len >= sizeof utf8)
        return -ENAMETOOLONG;
    for (char *p = utf8 + 6; *p; p++)
        if (*p == '\\' || *p == '/')
            *p = '_'; /* a backslash would name another namespace */
    if (!MultiByteToWideChar(CP_UTF8, 0, utf8, -1, out, (int)n))
        return -ENAMETOOLONG;
    return 0;
}

/* The segments this process opened, and the view of each it maps. An entry
 * outlives its handle while its view is mapped: the view's words are
 * waited on by the segment's name. */
typedef struct {
    HANDLE handle; /* NULL once closed */
    char name[NAME_MAX_CHARS];
    uint64_t size;
    char *view;    /* the first view this process mapped, NULL if none */
    uint64_t view_size;
    bool view_writable;
} segment_t;

/* Grows as segments are opened: tcmd has one per client (up to
 * max_clients) besides its own. */
static segment_t *segments;
static size_t nsegments;
static SRWLOCK segments_lock = SRWLOCK_INIT;

static void segment_add(HANDLE h, const char *name, uint64_t size)
{
    AcquireSRWLockExclusive(&segments_lock);
    size_t i = 0;
    while (i < nsegments && (segments[i].handle || segments[i].view))
        i++;
    if (i == nsegments) {
        size_t n = nsegments ? 2 * nsegments : 16;
        segment_t *grown = realloc(segments, n * sizeof *grown);
        if (grown) {
            memset(grown + nsegments, 0, (n - nsegments) * sizeof *grown);
            segments = grown;
            nsegments = n;
        }
    }
    if (i < nsegments) { /* else out of memory: commits use a short-lived view, waits poll */
        segments[i] = (segment_t){.handle = h, .size = size};
        snprintf(segments[i].name, sizeof segments[i].name, "%s", name);
    }
    ReleaseSRWLockExclusive(&segments_lock);
}

/* A copy of the entry of handle h (false if this process did not open it). */
static bool segment_of_handle(HANDLE h, segment_t *out)
{
    bool found = false;
    AcquireSRWLockShared(&segments_lock);
    for (size_t i = 0; i < nsegments && !found; i++)
        if (segments[i].handle == h)
            *out = segments[i], found = true;
    ReleaseSRWLockShared(&segments_lock);
    return found;
}

/* The entry whose view holds addr. */
static bool segment_of_address(const void *addr, segment_t *out)
{
    bool found = false;
    const char *a = addr;
    AcquireSRWLockShared(&segments_lock);
    for (size_t i = 0; i < nsegments && !found; i++) {
        segment_t *sg = &segments[i];
        if (sg->view && a >= sg->view && a < sg->view + sg->view_size)
            *out = *sg, found = true;
    }
    ReleaseSRWLockShared(&segments_lock);
    return found;
}

static uint64_t section_size(HANDLE h)
{
    /* NtQuerySection's SectionBasicInformation: base, attributes, size */
    typedef struct {
        PVOID base;
        ULONG attributes;
        LARGE_INTEGER size;
    } basic_info_t;
    typedef LONG(NTAPI * query_fn)(HANDLE, int, PVOID, SIZE_T, PSIZE_T);
    static query_fn query;
    if (!query)
        query = (query_fn)(void (*)(void))GetProcAddress(GetModuleHandleW(L"ntdll.dll"), "NtQuerySection");
    basic_info_t info;
    if (!query || query(h, 0, &info, sizeof info, NULL) != 0)
        return 0;
    return (uint64_t)info.size.QuadPart;
}

tcm_handle_t tcm__shm_create(const char *name, uint64_t size, unsigned mode)
{
    (void)mode; /* the default DACL: the creating user (and SYSTEM, administrators) */
    wchar_t wname[NAME_MAX_CHARS + 64];
    int err = object_name(name, NULL, wname, sizeof wname / sizeof wname[0]);
    if (err)
        return err;
    HANDLE h = CreateFileMappingW(INVALID_HANDLE_VALUE, NULL, PAGE_READWRITE | SEC_RESERVE,
                                  (DWORD)(size >> 32), (DWORD)size, wname);
    if (!h)
        return last_error();
    if (GetLastError() == ERROR_ALREADY_EXISTS) {
        CloseHandle(h);
        return -EEXIST;
    }
    segment_add(h, name, size);
    return from_handle(h);
}

tcm_handle_t tcm__shm_open(const char *name, bool writable)
{
    wchar_t wname[NAME_MAX_CHARS + 64];
    int err = object_name(name, NULL, wname, sizeof wname / sizeof wname[0]);
    if (err)
        return err;
    /* SECTION_QUERY: its size, for tcm__shm_stat (NtQuerySection) */
    HANDLE h = OpenFileMappingW(SECTION_QUERY | FILE_MAP_READ | (writable ? FILE_MAP_WRITE : 0), FALSE, wname);
    if (!h)
        return last_error();
    segment_add(h, name, section_size(h));
    return from_handle(h);
}

int tcm__shm_unlink(const char *name)
{
    (void)name; /* a section goes with its last handle and view */
    return 0;
}

int tcm__shm_unlink_prefix(const char *prefix)
{
    (void)prefix;
    return 0;
}

int tcm__path_share(const char *path, tcm_gid_t gid, unsigned mode)
{
    (void)path, (void)gid, (void)mode;
    return -ENOSYS;
}

int tcm__group_id(const char *name, tcm_gid_t *gid)
{
    (void)name, (void)gid;
    return -ENOSYS;
}

int tcm__user_id(const char *name, uint32_t *uid)
{
    char *end;
    unsigned long v = strtoul(name, &end, 10);
    if (!*name || *end)
        return -ENOSYS; /* numbers only */
    *uid = (uint32_t)v;
    return 0;
}

void tcm__close(tcm_handle_t fd)
{
    if (fd < 0)
        return;
    HANDLE h = to_handle(fd);
    AcquireSRWLockExclusive(&segments_lock);
    for (size_t i = 0; i < nsegments; i++)
        if (segments[i].handle == h)
            segments[i].handle = NULL; /* the entry stays while its view does */
    ReleaseSRWLockExclusive(&segments_lock);
    CloseHandle(h);
}

static const char *region_kind(DWORD type)
{
    return type == MEM_IMAGE ? "an image" : type == MEM_MAPPED ? "a mapped view" : "private memory";
}

/* What occupies [lo, hi) in this process, for the message. */
static void describe_clash(uintptr_t lo, uintptr_t hi, char *err, size_t errlen)
{
    snprintf(err, errlen, "address range 0x%llx-0x%llx is already in use in this process",
             (unsigned long long)lo, (unsigned long long)hi);
    for (uintptr_t a = lo; a < hi;) {
        MEMORY_BASIC_INFORMATION mi;
        if (!VirtualQuery((void *)a, &mi, sizeof mi))
            break;
        uintptr_t base = (uintptr_t)mi.AllocationBase, end = (uintptr_t)mi.BaseAddress + mi.RegionSize;
        if (mi.State != MEM_FREE) {
            /* the regions of the same allocation after this one */
            MEMORY_BASIC_INFORMATION next;
            while (VirtualQuery((void *)end, &next, sizeof next) && next.AllocationBase == mi.AllocationBase &&
                   next.State != MEM_FREE)
                end = (uintptr_t)next.BaseAddress + next.RegionSize;
            snprintf(err, errlen,
                     "heap range 0x%llx-0x%llx clashes with existing mapping 0x%llx-0x%llx (%s) "
                     "(start tcmd with another --base)",
                     (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)base,
                     (unsigned long long)end, region_kind(mi.Type));
            return;
        }
        a = end;
    }
}

void *tcm__map(tcm_handle_t fd, uint64_t size, void *at, bool writable, char *err, size_t errlen)
{
    HANDLE h = to_handle(fd);
    void *p = MapViewOfFileEx(h, FILE_MAP_READ | (writable ? FILE_MAP_WRITE : 0), 0, 0, (SIZE_T)size, at);
    if (!p) {
        DWORD e = GetLastError();
        if (at && e == ERROR_INVALID_ADDRESS)
            describe_clash((uintptr_t)at, (uintptr_t)at + size, err, errlen);
        else
            snprintf(err, errlen, "MapViewOfFileEx(%p, %llu) failed: error %lu", at, (unsigned long long)size,
                     (unsigned long)e);
        errno = errno_of(e);
        return NULL;
    }
    AcquireSRWLockExclusive(&segments_lock);
    for (size_t i = 0; i < nsegments; i++) {
        segment_t *s = &segments[i];
        if (s->handle == h && (!s->view || (writable && !s->view_writable))) {
            s->view = p;
            s->view_size = size;
            s->view_writable = writable;
            if (!s->size)
                s->size = size;
            break;
        }
    }
    ReleaseSRWLockExclusive(&segments_lock);
    return p;
}

static void forget_words(const char *lo, const char *hi);

void tcm__unmap(void *p, uint64_t size)
{
    if (!p)
        return;
    forget_words(p, (char *)p + size);
    AcquireSRWLockExclusive(&segments_lock);
    for (size_t i = 0; i < nsegments; i++)
        if (segments[i].view == p)
            segments[i].view = NULL;
    ReleaseSRWLockExclusive(&segments_lock);
    UnmapViewOfFile(p);
}

void *tcm__reserve(uint64_t size)
{
    /* committed up front (Windows has no overcommit), backed when touched */
    return VirtualAlloc(NULL, (SIZE_T)size, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
}

/* A view of the segment behind fd for [off, off + len): this process's own,
 * or a temporary one (*temp set) when it has none that is writable enough. */
static char *view_for(tcm_handle_t fd, uint64_t off, uint64_t len, bool writable, char **temp)
{
    segment_t s;
    *temp = NULL;
    if (segment_of_handle(to_handle(fd), &s) && s.view && (s.view_writable || !writable) &&
        off + len <= s.view_size)
        return s.view + off;
    /* the whole section: Wine loses a commit made through a view that
     * starts past the section's first byte */
    char *v = MapViewOfFile(to_handle(fd), FILE_MAP_READ | (writable ? FILE_MAP_WRITE : 0), 0, 0, 0);
    if (!v)
        return NULL;
    *temp = v;
    return v + off;
}

/* Committed bytes of [p, p + len) of a view. */
static uint64_t committed_in(const char *p, uint64_t len)
{
    uint64_t total = 0;
    for (const char *a = p, *end = p + len; a < end;) {
        MEMORY_BASIC_INFORMATION mi;
        if (!VirtualQuery(a, &mi, sizeof mi))
            break;
        const char *next = (const char *)mi.BaseAddress + mi.RegionSize;
        if (next > end)
            next = end;
        if (mi.State == MEM_COMMIT)
            total += (uint64_t)(next - a);
        a = next;
    }
    return total;
}

enum range_op { COMMIT, RESET, COUNT_COMMITTED };

/* op on [off, off + len) of the segment behind fd, through a view of it:
 * 0 or -errno, or for COUNT_COMMITTED the bytes committed. */
static int64_t on_range(tcm_handle_t fd, uint64_t off, uint64_t len, enum range_op op)
{
    char *temp, *p = view_for(fd, off, len, op != COUNT_COMMITTED, &temp);
    if (!p)
        return last_error();
    int64_t rc;
    if (op == COMMIT) {
        rc = VirtualAlloc(p, (SIZE_T)len, MEM_COMMIT, PAGE_READWRITE) ? 0 : last_error();
    } else if (op == RESET) {
        rc = VirtualAlloc(p, (SIZE_T)len, MEM_RESET, PAGE_READWRITE) ? 0 : last_error();
        VirtualUnlock(p, (SIZE_T)len); /* fails (not locked) and takes the pages out of the working set */
    } else {
        rc = (int64_t)committed_in(p, len);
    }
    if (temp)
        UnmapViewOfFile(temp);
    return rc;
}

int tcm__commit(tcm_handle_t fd, uint64_t off, uint64_t len)
{
    return (int)on_range(fd, off, len, COMMIT);
}

int tcm__discard(void *addr, uint64_t len)
{
    return VirtualAlloc(addr, (SIZE_T)len, MEM_RESET, PAGE_READWRITE) ? 0 : -EINVAL;
}

int tcm__release(tcm_handle_t fd, uint64_t off, uint64_t len)
{
    return (int)on_range(fd, off, len, RESET);
}

bool tcm__released_reads_zero(void)
{
    return false; /* MEM_RESET keeps a page's contents until the system needs it */
}

int tcm__collapse(void *addr, uint64_t len)
{
    (void)addr;
    (void)len;
    return -ENOSYS; /* large pages on Windows are locked at creation (SEC_LARGE_PAGES), not collapsed */
}

int64_t tcm__huge_mapped_bytes(const void *addr)
{
    (void)addr;
    return -ENOSYS;
}

int tcm__populate(void *addr, uint64_t len)
{
    segment_t s;
    if (!segment_of_address(addr, &s))
        return 0; /* private memory is committed when reserved */
    uintptr_t lo = (uintptr_t)addr & ~(uintptr_t)4095;
    uintptr_t hi = ((uintptr_t)addr + len + 4095) & ~(uintptr_t)4095;
    if (hi > lo && !VirtualAlloc((void *)lo, hi - lo, MEM_COMMIT, PAGE_READWRITE))
        return last_error();
    return 0;
}

int64_t tcm__backed_bytes(tcm_handle_t fd)
{
    segment_t s;
    if (!segment_of_handle(to_handle(fd), &s) || !s.size)
        return -EBADF;
    return on_range(fd, 0, s.size, COUNT_COMMITTED);
}

int tcm__backed_range(tcm_handle_t fd, uint64_t off, uint64_t len)
{
    int64_t n = on_range(fd, off, len, COUNT_COMMITTED);
    return n < 0 ? (int)n : n == (int64_t)len;
}

int64_t tcm__resident_bytes(const void *addr, uint64_t len)
{
    enum { BATCH = 256 };
    PSAPI_WORKING_SET_EX_INFORMATION info[BATCH];
    uintptr_t lo = (uintptr_t)addr & ~(uintptr_t)4095, hi = (uintptr_t)addr + len;
    int64_t total = 0;
    while (lo < hi) {
        size_t n = 0;
        for (; n < BATCH && lo + n * 4096 < hi; n++)
            info[n].VirtualAddress = (void *)(lo + n * 4096);
        if (!QueryWorkingSetEx(GetCurrentProcess(), info, (DWORD)(n * sizeof info[0])))
            return last_error();
        for (size_t i = 0; i < n; i++)
            total += info[i].VirtualAttributes.Valid ? 4096 : 0;
        lo += n * 4096;
    }
    return total;
}

static uint32_t sid_rid(PSID sid)
{
    if (!sid || !IsValidSid(sid))
        return 0;
    UCHAR n = *GetSidSubAuthorityCount(sid);
    return n ? (uint32_t)*GetSidSubAuthority(sid, n - 1u) : 0;
}

int tcm__shm_cut(tcm_handle_t fd, uint64_t size)
{
    (void)fd, (void)size;
    return -ENOSYS; /* a section's size is fixed: it cannot have grown */
}

int tcm__shm_stat(tcm_handle_t fd, uint64_t *size, tcm_uid_t *uid, unsigned *mode)
{
    HANDLE h = to_handle(fd);
    segment_t s;
    *size = segment_of_handle(h, &s) && s.size ? s.size : section_size(h);
    PSID owner = NULL;
    PSECURITY_DESCRIPTOR sd = NULL;
    if (GetSecurityInfo(h, SE_KERNEL_OBJECT, OWNER_SECURITY_INFORMATION, &owner, NULL, NULL, NULL, &sd) !=
        ERROR_SUCCESS)
        owner = NULL;
    /* Wine keeps no owner on sections: the object is in our session's
     * namespace, which only our user's processes reach */
    *uid = owner ? sid_rid(owner) : tcm__uid();
    if (sd)
        LocalFree(sd);
    *mode = 0600;
    return 0;
}

/* Waits on shared words: one auto-reset named event per (segment, offset),
 * opened once per process and kept until the view goes, found by the
 * word's address in an open-addressing table (tcmd wakes the slots of every
 * client thread: thousands of words). */
typedef struct {
    const void *word;
    HANDLE event;
} word_event_t;

static word_event_t *words;
static size_t words_cap, words_used; /* cap: a power of two, at most half full */
static SRWLOCK words_lock = SRWLOCK_INIT;

static size_t word_hash(const void *word)
{
    return (size_t)(((uintptr_t)word >> 2) * 0x9e3779b97f4a7c15ull >> 20);
}

/* The entry of word, or the empty one where it would go. Lock held. */
static word_event_t *word_entry(const void *word)
{
    for (size_t i = word_hash(word) & (words_cap - 1);; i = (i + 1) & (words_cap - 1))
        if (words[i].word == word || !words[i].word)
            return &words[i];
}

static HANDLE known_event(const void *word)
{
    HANDLE ev = NULL;
    AcquireSRWLockShared(&words_lock);
    if (words_cap)
        ev = word_entry(word)->event;
    ReleaseSRWLockShared(&words_lock);
    return ev;
}

/* Rebuild the table with room for at least want entries, leaving out those
 * in [lo, hi) (closed). Lock held. */
static void words_rebuild(size_t want, const char *lo, const char *hi)
{
    size_t cap = 64;
    while (cap < 2 * want)
        cap *= 2;
    word_event_t *old = words, *fresh = calloc(cap, sizeof *fresh);
    size_t old_cap = words_cap;
    if (!fresh)
        return; /* keep the old table */
    words = fresh;
    words_cap = cap;
    words_used = 0;
    for (size_t i = 0; i < old_cap; i++) {
        const char *w = old[i].word;
        if (!w)
            continue;
        if (w >= lo && w < hi) {
            CloseHandle(old[i].event);
            continue;
        }
        *word_entry(w) = old[i];
        words_used++;
    }
    free(old);
}

static HANDLE event_for(const segment_t *s, const void *word)
{
    char suffix[32];
    wchar_t wname[NAME_MAX_CHARS + 64];
    snprintf(suffix, sizeof suffix, ".w%llx", (unsigned long long)((const char *)word - s->view));
    if (object_name(s->name, suffix, wname, sizeof wname / sizeof wname[0]) != 0)
        return NULL;
    HANDLE ev = CreateEventW(NULL, FALSE, FALSE, wname); /* or opens the waker's */
    if (!ev)
        return NULL;
    AcquireSRWLockExclusive(&words_lock);
    if (2 * (words_used + 1) > words_cap)
        words_rebuild(words_used + 1, NULL, NULL);
    HANDLE kept = NULL;
    if (2 * (words_used + 1) <= words_cap) {
        word_event_t *e = word_entry(word);
        if (!e->word) { /* else another thread of ours got there first */
            *e = (word_event_t){word, ev};
            words_used++;
        }
        kept = e->event;
    }
    ReleaseSRWLockExclusive(&words_lock);
    if (kept != ev) {
        CloseHandle(ev); /* a duplicate, or no memory for the table (-> NULL: callers poll) */
        ev = kept;
    }
    return ev;
}

static void forget_words(const char *lo, const char *hi)
{
    AcquireSRWLockExclusive(&words_lock);
    if (words_cap)
        words_rebuild(words_used, lo, hi);
    ReleaseSRWLockExclusive(&words_lock);
}

static DWORD timeout_ms(int64_t timeout_ns)
{
    if (timeout_ns < 0)
        return INFINITE;
    uint64_t ms = ((uint64_t)timeout_ns + 999999) / 1000000;
    return ms >= INFINITE ? INFINITE - 1 : (DWORD)ms;
}

/* The futex contract: returns at once (-EAGAIN) when the word no longer
 * holds expected, else sleeps until a wake, the timeout (-ETIMEDOUT) or a
 * spurious return (callers loop). A wake between the check and the sleep
 * leaves the event set, so the sleep returns at once: no lost wakeup. */
int tcm__wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
    segment_t s;
    HANDLE ev = known_event((const void *)word);
    if (!ev && !segment_of_address((const void *)word, &s)) {
        uint32_t cmp = expected;
        if (WaitOnAddress((volatile void *)word, &cmp, sizeof cmp, timeout_ms(timeout_ns)))
            return 0;
        return GetLastError() == ERROR_TIMEOUT ? -ETIMEDOUT : last_error();
    }
    if (!ev)
        ev = event_for(&s, (const void *)word);
    if (atomic_load_explicit(word, memory_order_acquire) != expected)
        return -EAGAIN;
    if (!ev) { /* no event to sleep on: poll */
        Sleep(1);
        return 0;
    }
    DWORD r = WaitForSingleObject(ev, timeout_ms(timeout_ns));
    return r == WAIT_OBJECT_0 ? 0 : r == WAIT_TIMEOUT ? -ETIMEDOUT : last_error();
}

void tcm__wake(_Atomic uint32_t *word, int n)
{
    segment_t s;
    HANDLE ev = known_event((const void *)word);
    if (!ev && !segment_of_address((const void *)word, &s)) {
        if (n == 1)
            WakeByAddressSingle((void *)word);
        else
            WakeByAddressAll((void *)word);
        return;
    }
    /* one waiter per word (prim.h): an auto-reset event wakes it, and a wake
     * that finds it awake is taken by its next wait (one spurious return) */
    if (!ev)
        ev = event_for(&s, (const void *)word);
    if (ev)
        SetEvent(ev);
}

/* One daemon per name: a named mutex owned by the calling thread (tcmd's
 * main thread, for the life of the process). A holder that died leaves it
 * abandoned, which the next one takes. */
tcm_handle_t tcm__lock_name(const char *name)
{
    wchar_t wname[NAME_MAX_CHARS + 64];
    int err = object_name(name, NULL, wname, sizeof wname / sizeof wname[0]);
    if (err)
        return err;
    HANDLE m = CreateMutexW(NULL, FALSE, wname);
    if (!m)
        return last_error();
    DWORD r = WaitForSingleObject(m, 0);
    if (r == WAIT_OBJECT_0 || r == WAIT_ABANDONED)
        return from_handle(m);
    CloseHandle(m);
    return r == WAIT_TIMEOUT ? -EBUSY : last_error();
}

/* A process handle keeps its pid from being reused while tcmd holds it,
 * and its creation time tells a later process with the same pid apart
 * after a restart. */
tcm_handle_t tcm__proc_watch(tcm_pid_t pid, uint64_t *start)
{
    HANDLE h = OpenProcess(SYNCHRONIZE | PROCESS_QUERY_LIMITED_INFORMATION, FALSE, (DWORD)pid);
    if (!h)
        return GetLastError() == ERROR_INVALID_PARAMETER ? -ESRCH : last_error();
    FILETIME created, exited, kernel, user;
    if (!GetProcessTimes(h, &created, &exited, &kernel, &user)) {
        int err = last_error();
        CloseHandle(h);
        return err;
    }
    *start = (uint64_t)created.dwHighDateTime << 32 | created.dwLowDateTime;
    return from_handle(h);
}

bool tcm__secure_exec(void)
{
    return false; /* no set-user-ID programs */
}

const char *tcm__env(const char *name)
{
    return getenv(name);
}

int tcm__read_root_file(const char *path, char *buf, size_t len)
{
    (void)path;
    buf[0] = 0;
    (void)len;
    return -ENOSYS;
}

int tcm__proc_maps_shm(tcm_pid_t pid, const char *shm_name)
{
    (void)pid, (void)shm_name;
    return -ENOSYS;
}

tcm_handle_t tcm__peer_proc_watch(tcm_handle_t sockfd, tcm_pid_t pid, uint64_t *start)
{
    (void)sockfd; /* a pipe client's process id is what the pipe says: no pidfd to ask for */
    return tcm__proc_watch(pid, start);
}

void tcm__proc_names(tcm_pid_t pid, char *comm, size_t commlen, char *exe, size_t exelen)
{
    comm[0] = exe[0] = 0;
    HANDLE h = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, (DWORD)pid);
    if (!h)
        return;
    char buf[MAX_PATH];
    DWORD n = sizeof buf;
    if (QueryFullProcessImageNameA(h, 0, buf, &n) && n > 0 && exelen) {
        size_t keep = n < exelen - 1 ? n : exelen - 1;
        memcpy(exe, buf + n - keep, keep + 1);
        const char *base = strrchr(buf, '\\');
        snprintf(comm, commlen, "%s", base ? base + 1 : buf);
    }
    CloseHandle(h);
}

bool tcm__proc_exited(tcm_handle_t watch)
{
    return watch < 0 || WaitForSingleObject(to_handle(watch), 0) != WAIT_TIMEOUT;
}

bool tcm__proc_watch_pollable(void)
{
    return false; /* libuv polls only sockets here: tcmd's liveness timer asks instead */
}

/* A HANDLE value is not reused while the library holds it open, and the
 * application cannot close it without knowing it: the identity is the
 * handle itself. */
int tcm__file_id(tcm_handle_t fd, tcm_file_id_t *id)
{
    if (fd < 0)
        return -EBADF;
    id->dev = 0;
    id->ino = (uint64_t)(uint32_t)fd;
    return 0;
}

bool tcm__file_is(tcm_handle_t fd, const tcm_file_id_t *id)
{
    return fd >= 0 && id->ino == (uint64_t)(uint32_t)fd;
}

/* A mapped section cannot be made smaller, so there is nothing to excuse. */
int tcm__fault_zones_init(void)
{
    return 0;
}

int tcm__fault_zone_add(void *lo, uint64_t len, _Atomic uint32_t *tripped)
{
    (void)lo, (void)len, (void)tripped;
    return 0;
}

void tcm__fault_zone_remove(int id)
{
    (void)id;
}

int tcm__read_at(tcm_handle_t fd, const void *mapped, uint64_t off, void *buf, uint64_t len)
{
    (void)fd;
    memcpy(buf, (const uint8_t *)mapped + off, len);
    return 0;
}

int tcm__keep_alive_in(tcm_handle_t fd, tcm_pid_t pid)
{
    HANDLE proc = OpenProcess(PROCESS_DUP_HANDLE, FALSE, (DWORD)pid), dup = NULL;
    if (!proc)
        return last_error();
    /* access 0: the handle keeps the section, and grants nothing */
    BOOL ok = DuplicateHandle(GetCurrentProcess(), to_handle(fd), proc, &dup, 0, FALSE, 0);
    int rc = ok ? 0 : last_error();
    CloseHandle(proc);
    return rc;
}

/* The control channel is a named pipe: libuv's uv_pipe_t is one on Windows,
 * so tcmd's loop can serve it as it serves the unix socket. A socket path
 * names the pipe \\.\pipe\<path with its separators as '_'>. */
static int pipe_name(const char *path, char *out, size_t n)
{
    if (strncmp(path, "\\\\.\\pipe\\", 9) == 0)
        return snprintf(out, n, "%s", path) < (int)n ? 0 : -ENAMETOOLONG;
    int len = snprintf(out, n, "\\\\.\\pipe\\tcm%s", path);
    if (len < 0 || (size_t)len >= n)
        return -ENAMETOOLONG;
    for (char *p = out + 9; *p; p++)
        if (*p == '/' || *p == '\\' || *p == ':')
            *p = '_';
    return 0;
}

int tcm__socket_bind_name(const char *path, char *out, size_t len)
{
    return pipe_name(path, out, len);
}

int tcm__socket_publish(const char *bound, const char *path)
{
    (void)bound, (void)path; /* a pipe is there as soon as it is bound */
    return 0;
}

tcm_handle_t tcm__connect(const char *path)
{
    char name[300];
    int err = pipe_name(path, name, sizeof name);
    if (err)
        return err;
    for (int tries = 0;; tries++) {
        HANDLE h = CreateFileA(name, GENERIC_READ | GENERIC_WRITE, 0, NULL, OPEN_EXISTING, 0, NULL);
        if (h != INVALID_HANDLE_VALUE)
            return from_handle(h);
        DWORD e = GetLastError();
        if (e != ERROR_PIPE_BUSY || tries == 10)
            return e == ERROR_PIPE_BUSY ? -ECONNREFUSED : -errno_of(e);
        WaitNamedPipeA(name, 200); /* every instance is taken: wait for one */
    }
}

/* The token of process pid: its user's and primary group's RIDs, or
 * whether group gid is among its groups. */
static HANDLE process_token(DWORD pid)
{
    HANDLE proc = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, pid), token = NULL;
    if (!proc)
        return NULL;
    if (!OpenProcessToken(proc, TOKEN_QUERY, &token))
        token = NULL;
    CloseHandle(proc);
    return token;
}

static uint32_t token_rid(HANDLE token, TOKEN_INFORMATION_CLASS what)
{
    union {
        TOKEN_USER user;
        TOKEN_PRIMARY_GROUP group;
        char space[256];
    } info;
    DWORD len;
    if (!GetTokenInformation(token, what, &info, sizeof info, &len))
        return 0;
    return sid_rid(what == TokenUser ? info.user.User.Sid : info.group.PrimaryGroup);
}

/* The process at the other end of a pipe: the client if we are the server. */
static DWORD pipe_peer(HANDLE h)
{
    ULONG pid = 0, self = GetCurrentProcessId();
    if (GetNamedPipeClientProcessId(h, &pid) && pid != self)
        return pid;
    if (GetNamedPipeServerProcessId(h, &pid))
        return pid;
    return 0;
}

int tcm__peer_cred(tcm_handle_t sockfd, tcm_pid_t *pid, tcm_uid_t *uid, tcm_gid_t *gid)
{
    DWORD peer = pipe_peer(to_handle(sockfd));
    if (!peer)
        return last_error();
    HANDLE token = process_token(peer);
    if (!token)
        return last_error();
    *pid = (tcm_pid_t)peer;
    *uid = token_rid(token, TokenUser);
    *gid = token_rid(token, TokenPrimaryGroup);
    CloseHandle(token);
    return 0;
}

bool tcm__socket_hung_up(tcm_handle_t sockfd)
{
    DWORD avail;
    if (sockfd < 0)
        return true;
    return !PeekNamedPipe(to_handle(sockfd), NULL, 0, NULL, &avail, NULL);
}

bool tcm__peer_in_group(tcm_handle_t sockfd, tcm_gid_t primary, tcm_gid_t gid)
{
    if (primary == gid)
        return true;
    HANDLE token = process_token(pipe_peer(to_handle(sockfd)));
    if (!token)
        return false;
    bool found = false;
    DWORD len = 0;
    GetTokenInformation(token, TokenGroups, NULL, 0, &len);
    TOKEN_GROUPS *groups = len ? malloc(len) : NULL;
    if (groups && GetTokenInformation(token, TokenGroups, groups, len, &len))
        for (DWORD i = 0; i < groups->GroupCount && !found; i++)
            found = sid_rid(groups->Groups[i].Sid) == gid;
    free(groups);
    CloseHandle(token);
    return found;
}

/* Descriptors do not travel on Windows: tcmd sends the Welcome as any reply
 * (through libuv, whose pipe is overlapped) and the client opens the
 * segments by the names it carries, with the access its own token allows. */
bool tcm__handles_travel(void)
{
    return false;
}

int tcm__send_with_fds(tcm_handle_t sockfd, const void *buf, size_t len, const tcm_handle_t *fds, int nfds)
{
    (void)sockfd, (void)buf, (void)len, (void)fds, (void)nfds;
    return -EOPNOTSUPP;
}

long tcm__recv_with_fds(tcm_handle_t sockfd, void *buf, size_t len, tcm_handle_t *fds, int maxfds, int *nfds)
{
    (void)fds, (void)maxfds, (void)nfds;
    DWORD got = 0;
    if (!ReadFile(to_handle(sockfd), buf, (DWORD)(len > 1u << 30 ? 1u << 30 : len), &got, NULL)) {
        DWORD e = GetLastError();
        return e == ERROR_BROKEN_PIPE || e == ERROR_PIPE_NOT_CONNECTED ? 0 : -errno_of(e);
    }
    return (long)got;
}

int tcm__send_all(tcm_handle_t sockfd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        DWORD put = 0;
        if (!WriteFile(to_handle(sockfd), p, (DWORD)(len > 1u << 30 ? 1u << 30 : len), &put, NULL)) {
            DWORD e = GetLastError();
            return e == ERROR_NO_DATA || e == ERROR_BROKEN_PIPE ? -EPIPE : -errno_of(e);
        }
        p += put;
        len -= put;
    }
    return 0;
}

/* A pipe opened without overlapped I/O has no read with a timeout: wait
 * for bytes with PeekNamedPipe, in 1 ms steps. */
int tcm__recv_all(tcm_handle_t sockfd, void *buf, size_t len, int timeout_ms_, tcm_handle_t *fds, int maxfds,
                  int *nfds)
{
    char *p = buf;
    uint64_t deadline = timeout_ms_ < 0 ? UINT64_MAX : tcm__now_ns() + (uint64_t)timeout_ms_ * 1000000ull;
    while (len) {
        DWORD avail = 0;
        if (!PeekNamedPipe(to_handle(sockfd), NULL, 0, NULL, &avail, NULL))
            return -ECONNRESET;
        if (!avail) {
            if (tcm__now_ns() >= deadline)
                return -ETIMEDOUT;
            Sleep(1);
            continue;
        }
        long got = tcm__recv_with_fds(sockfd, p, len < avail ? len : avail, fds, maxfds, nfds);
        if (got <= 0)
            return got == 0 ? -ECONNRESET : (int)got;
        p += got;
        len -= (size_t)got;
        if (timeout_ms_ >= 0) /* the timeout is for each read, as on Linux */
            deadline = tcm__now_ns() + (uint64_t)timeout_ms_ * 1000000ull;
    }
    return 0;
}

int tcm__socket_placeholder(const char *path)
{
    (void)path;
    return -ENOSYS;
}

tcm_pid_t tcm__detach(tcm_handle_t log_fd, tcm_handle_t *ready)
{
    (void)log_fd, (void)ready;
    return -ENOSYS; /* a service, not a forked daemon, on Windows */
}

void tcm__detach_ready(tcm_handle_t ready)
{
    (void)ready;
}

uint64_t tcm__thread_cpu_ns(void)
{
    FILETIME created, exited, kernel, user;
    if (!GetThreadTimes(GetCurrentThread(), &created, &exited, &kernel, &user))
        return 0;
    uint64_t k = (uint64_t)kernel.dwHighDateTime << 32 | kernel.dwLowDateTime;
    uint64_t u = (uint64_t)user.dwHighDateTime << 32 | user.dwLowDateTime;
    return (k + u) * 100; /* 100 ns units */
}

uint64_t tcm__now_ns(void)
{
    static LARGE_INTEGER freq;
    LARGE_INTEGER now;
    if (!freq.QuadPart)
        QueryPerformanceFrequency(&freq);
    QueryPerformanceCounter(&now);
    uint64_t f = (uint64_t)freq.QuadPart, t = (uint64_t)now.QuadPart;
    return t / f * 1000000000ull + t % f * 1000000000ull / f;
}

uint64_t tcm__random64(void)
{
    uint64_t v = 0;
    if (BCryptGenRandom(NULL, (PUCHAR)&v, sizeof v, BCRYPT_USE_SYSTEM_PREFERRED_RNG) != 0)
        v = tcm__now_ns() ^ ((uint64_t)GetCurrentProcessId() << 32);
    return v;
}

void tcm__sleep_ns(uint64_t ns)
{
    Sleep((DWORD)((ns + 999999) / 1000000));
}

void tcm__yield(void)
{
    SwitchToThread();
}

uint64_t tcm__thread_id(void)
{
    return GetCurrentThreadId();
}

static int priority_of_nice(int nice)
{
    return nice <= -15  ? THREAD_PRIORITY_HIGHEST
           : nice <= -5 ? THREAD_PRIORITY_ABOVE_NORMAL
           : nice < 5   ? THREAD_PRIORITY_NORMAL
           : nice < 15  ? THREAD_PRIORITY_BELOW_NORMAL
                        : THREAD_PRIORITY_LOWEST;
}

int tcm__thread_set_nice(uint64_t tid, int nice)
{
    HANDLE t = OpenThread(THREAD_SET_INFORMATION, FALSE, (DWORD)tid);
    if (!t)
        return last_error();
    BOOL ok = SetThreadPriority(t, priority_of_nice(nice));
    DWORD err = GetLastError();
    CloseHandle(t);
    return ok ? 0 : -errno_of(err);
}

void tcm__wall_clock(char *buf, size_t len)
{
    SYSTEMTIME t;
    GetLocalTime(&t);
    snprintf(buf, len, "%04u-%02u-%02u %02u:%02u:%02u.%03u", t.wYear, t.wMonth, t.wDay, t.wHour, t.wMinute,
             t.wSecond, t.wMilliseconds);
}

void tcm__format_time(uint64_t secs, char *buf, size_t len)
{
    __time64_t t = (__time64_t)secs;
    struct tm tm;
    if (_localtime64_s(&tm, &t) != 0)
        memset(&tm, 0, sizeof tm);
    strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
}

uint32_t tcm__pid(void)
{
    return (uint32_t)GetCurrentProcessId();
}

tcm_uid_t tcm__uid(void)
{
    static tcm_uid_t uid;
    if (uid)
        return uid;
    HANDLE token;
    union {
        TOKEN_USER user;
        char space[256];
    } info;
    DWORD len;
    if (OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &token)) {
        if (GetTokenInformation(token, TokenUser, &info, sizeof info, &len))
            uid = sid_rid(info.user.User.Sid);
        CloseHandle(token);
    }
    return uid;
}

tcm_uid_t tcm__login_uid(void)
{
    return tcm__uid();
}

int tcm__absolute_path(const char *path, char *out, size_t len)
{
    DWORD n = GetFullPathNameA(path, (DWORD)len, out, NULL);
    if (n == 0)
        return last_error();
    if (n >= len)
        return -ENAMETOOLONG;
    return GetFileAttributesA(out) == INVALID_FILE_ATTRIBUTES ? -ENOENT : 0;
}

bool tcm__is_terminal(tcm_handle_t fd)
{
    return _isatty(fd) != 0;
}

bool tcm__path_exists(const char *path)
{
    return GetFileAttributesA(path) != INVALID_FILE_ATTRIBUTES;
}

int tcm__unlink(const char *path)
{
    if (DeleteFileA(path))
        return 0;
    DWORD e = GetLastError();
    return e == ERROR_FILE_NOT_FOUND || e == ERROR_PATH_NOT_FOUND ? 0 : -errno_of(e);
}

int tcm__make_dirs(const char *dir, unsigned mode)
{
    (void)mode; /* the directory inherits its parent's ACL */
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return -ENAMETOOLONG;
    for (char *p = path + 1; *p; p++) {
        if (*p == '/' || *p == '\\') {
            char c = *p;
            *p = 0;
            CreateDirectoryA(path, NULL);
            *p = c;
        }
    }
    if (CreateDirectoryA(path, NULL))
        return 1;
    return GetLastError() == ERROR_ALREADY_EXISTS ? 0 : last_error();
}

unsigned tcm__umask(unsigned mask)
{
    return mask; /* no umask: objects get the default DACL */
}

void tcm__ignore_sigpipe(void)
{
    /* a write to a closed pipe is an error on Windows, never a signal */
}

void tcm__stop_signals_hold(bool hold)
{
    (void)hold; /* console control events go to a thread of their own */
}

int tcm__at_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
    (void)prepare, (void)parent, (void)child;
    return 0; /* no fork */
}

void *tcm__next_symbol(const char *name)
{
    (void)name;
    return NULL; /* no symbol interposition: the drop-in is for ELF systems */
}

void *tcm__loaded_symbol(const char *library, const char *name)
{
    (void)library, (void)name;
    return NULL; /* the drop-in's C++ operators are for ELF systems */
}

unsigned tcm__backtrace(uint64_t *frames, unsigned max, uintptr_t above)
{
    (void)frames, (void)max, (void)above;
    return 0; /* the heap profile's stacks: RtlCaptureStackBackTrace, not done yet */
}

size_t tcm__code_maps(char *buf, size_t len)
{
    (void)buf, (void)len;
    return 0;
}

uint64_t tcm__code_maps_gen(void)
{
    return 0;
}

bool tcm__is_regular_file(const char *path)
{
    DWORD a = GetFileAttributesA(path);
    return a != INVALID_FILE_ATTRIBUTES && !(a & (FILE_ATTRIBUTE_DIRECTORY | FILE_ATTRIBUTE_DEVICE));
}

size_t tcm__os_page_size(void)
{
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwPageSize;
}

int tcm__thread_start_quiet(pthread_t *t, void *(*fn)(void *), void *arg, const char *name)
{
    (void)name; /* Windows threads take no signals, and Wine has no thread names */
    int err = pthread_create(t, NULL, fn, arg);
    return err ? -err : 0;
}

void tcm__thread_name(pthread_t t, const char *name)
{
    (void)t, (void)name;
}

void tcm__kill_self(void)
{
    TerminateProcess(GetCurrentProcess(), 137);
    abort();
}

/* ---- descriptor limit (issue 20: bounded resources) ---- */

int tcm__fd_limit_raise(uint64_t want, uint64_t *now)
{
    *now = want; /* HANDLEs have no per-process limit to raise (only the kernel's quota) */
    return 0;
}

/* ---- Runtime directory and files ----------------------------------------- */

/* A named pipe lives in no directory: nothing to check. */
int tcm__dir_stat(const char *path, tcm_uid_t *uid, tcm_gid_t *gid, unsigned *mode)
{
    (void)path, (void)uid, (void)gid, (void)mode;
    return -ENOSYS;
}

/* Windows has no symbolic-link planting in a shared temporary directory to
 * guard against here (creating links needs a privilege): a plain append. */
int tcm__log_file_open(const char *path, bool devices_too, FILE **f, tcm_uid_t *owner)
{
    (void)devices_too;
    *owner = tcm__uid();
    *f = fopen(path, "a");
    return *f ? 0 : -errno;
}
