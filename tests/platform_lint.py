#!/usr/bin/env python3
"""platform_lint.py SOURCE_DIR — every OS call belongs to the platform layer.

tcm keeps its operating-system calls in shm/ (prim.h, with prim_linux.c and
prim_win.c behind it). This check fails when a source file of the programs
and libraries outside shm/, or the platform interface itself (prim.h,
ring.h), includes an OS header, uses a POSIX type (pid_t, uid_t, ...) or
calls a POSIX or Linux function directly. Comments and string literals are skipped.
tests/, bench/ and examples/ are programs of their own and are not checked.
"""
import pathlib
import re
import sys

CHECKED = ["client", "daemon", "proto", "common", "cli"]
# the platform interface itself, which both backends implement
INTERFACE = ["shm/prim.h", "shm/ring.h"]

HEADERS = re.compile(r"#\s*include\s*<(unistd|fcntl|dlfcn|pwd|grp|poll|dirent|termios|netdb|semaphore|spawn"
                     r"|sys/[\w/]+|linux/[\w/]+|netinet/[\w/]+|arpa/[\w/]+|windows|winsock2)(\.h)?>")
# POSIX types: prim.h has tcm_handle_t, tcm_pid_t, tcm_uid_t, tcm_gid_t (ssize_t
# stays: libuv callbacks take it on every platform)
TYPES = re.compile(r"(?<![\w])(pid_t|uid_t|gid_t|mode_t|off_t)(?![\w])")

CALLS = """
getpid getppid getuid geteuid getgid getegid setuid setgid setsid
unlink rename umask mkdir rmdir chdir chmod fchmod chown fchown access readlink realpath
open openat close read write pread pwrite lseek fsync ftruncate fallocate fstat lstat stat flock lockf
dup dup2 dup3 pipe pipe2 fcntl ioctl isatty
mmap munmap mremap madvise mprotect mincore msync mlock munlock sysconf getpagesize
shm_open shm_unlink memfd_create
socket socketpair connect bind listen accept accept4 send sendto sendmsg recv recvfrom recvmsg
shutdown setsockopt getsockopt getpeername getsockname
poll ppoll select pselect epoll_create epoll_create1 epoll_ctl epoll_wait eventfd
usleep nanosleep sleep clock_gettime clock_nanosleep gettimeofday
syscall prctl kill fork vfork execv execve execvp execl waitpid wait4 _exit
sigaction sigprocmask pthread_sigmask signal sigaltstack
pthread_atfork sched_yield sched_setaffinity
dlopen dlsym dlclose
getpwnam getpwuid getgrnam getgrgid getgrouplist getrandom localtime_r gmtime_r strerror_r strsignal
""".split()
CALL = re.compile(r"(?<![\w.>])(" + "|".join(CALLS) + r")\s*\(")


def strip(text):
    """The text with comments and string/char literals blanked (line breaks kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def main():
    root = pathlib.Path(sys.argv[1])
    problems = []
    files = [f for d in CHECKED for f in sorted((root / d).rglob("*"))
             if f.suffix in (".c", ".h", ".cpp")] + [root / f for f in INTERFACE]
    for f in files:
        text = f.read_text()
        for m in HEADERS.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{f.relative_to(root)}:{line}: includes <{m.group(1)}{m.group(2) or ''}>")
        code = strip(text)
        for m in TYPES.finditer(code):
            line = code.count("\n", 0, m.start()) + 1
            problems.append(f"{f.relative_to(root)}:{line}: uses the POSIX type {m.group(1)}")
        for m in CALL.finditer(code):
            if code[max(0, m.start() - 16):m.start()].rstrip().endswith(("define", "struct")):
                continue
            line = code.count("\n", 0, m.start()) + 1
            problems.append(f"{f.relative_to(root)}:{line}: calls {m.group(1)}()")
    for p in problems:
        print(p)
    if problems:
        print(f"platform lint: {len(problems)} OS calls or headers outside shm/; "
              "put them behind shm/prim.h", file=sys.stderr)
        return 1
    print(f"platform lint: {len(files)} files outside the backends make no OS call of their own")
    return 0


if __name__ == "__main__":
    sys.exit(main())
