/* tcm::allocator (tcm.hpp): a process builds a std::vector and a
 * std::unordered_map of strings in the heap, publishes them through a root
 * and execs an unrelated program (tcm_cxx_peer: no fork-inherited memory,
 * so plain malloc could not pass), which finds them, checks them and
 * changes them; the first sees every change, and frees it all (what the
 * peer allocated included): nothing is left held. */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "shared_types.hpp"

extern "C" {
#include "testutil.h"
}

#define CHECK(c)                                                                                                    \
    do {                                                                                                            \
        if (!(c)) {                                                                                                 \
            std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);                              \
            std::abort();                                                                                           \
        }                                                                                                           \
    } while (0)

int main()
{
    tcm_test_daemon_t d;
    tt_daemon_start(&d, nullptr);
    CHECK(tcm_init(d.socket) == 0);
    shared_t *s = tcm::make<shared_t>();
    for (int i = 0; i < 1000; i++)
        s->names.emplace_back(("name number " + std::to_string(i) + " long enough not to be short").c_str());
    for (int i = 0; i < 500; i++)
        s->attrs.emplace(("key" + std::to_string(i)).c_str(), ("value" + std::to_string(i)).c_str());
    CHECK(tcm_root_set(ROOT, s) == 0);

    pid_t pid = fork();
    if (pid == 0) {
        setenv("TCM_SOCKET", d.socket, 1);
        execl(TCM_CXX_PEER, "tcm_cxx_peer", (char *)nullptr);
        _exit(127);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);

    /* the peer's changes, seen here */
    CHECK(s->names.size() == 1500);
    CHECK(s->names[0] == "changed by the peer");
    CHECK(s->names[1499] == "added by the peer 499, a string on the heap");
    CHECK(s->attrs.size() == 750);
    CHECK(s->attrs.find("key0") == s->attrs.end());
    CHECK(s->attrs.at("key1") == "value1 and more, from the peer");
    CHECK(s->attrs.at("peer key 9") == "peer value 9");
    std::printf("cxx: an exec'd peer changed a vector of %zu and a map of %zu strings in the heap; seen here\n",
                s->names.size(), s->attrs.size());

    CHECK(tcm_root_set(ROOT, nullptr) == 0);
    tcm::destroy(s);
    tcm_shutdown();
    CHECK(tt_wait_stat(&d, "clients_attached", 0, 5000) == 0);
    CHECK(tt_stat(&d, "bytes_orphaned") == 0); /* the peer's strings were freed here */
    tt_daemon_stop(&d);
    std::printf("cxx: 1 passed, 0 failed\n");
    return 0;
}
