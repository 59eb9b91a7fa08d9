/* tcm_cxx_peer — exec'd by test_cxx: finds the containers through their
 * root, checks what the creator wrote and changes them. */
#include <cstdio>
#include <cstdlib>
#include <string>

#include "shared_types.hpp"

static void check(bool ok, const char *what)
{
    if (!ok) {
        std::fprintf(stderr, "tcm_cxx_peer: %s\n", what);
        std::exit(1);
    }
}

int main()
{
    check(tcm_init(nullptr) == 0, "cannot attach");
    auto *s = static_cast<shared_t *>(tcm_root_get(ROOT));
    check(s != nullptr, "no root");
    check(s->names.size() == 1000 && s->names[999] == "name number 999 long enough not to be short", "names");
    check(s->attrs.size() == 500 && s->attrs.at("key42") == "value42", "attrs");
    s->names[0] = "changed by the peer";
    for (int i = 0; i < 500; i++) /* grows it: the vector's storage moves, allocated here */
        s->names.emplace_back(("added by the peer " + std::to_string(i) + ", a string on the heap").c_str());
    s->attrs.erase("key0");
    s->attrs.at("key1") += " and more, from the peer";
    for (int i = 0; i < 251; i++)
        s->attrs.emplace(("peer key " + std::to_string(i)).c_str(), ("peer value " + std::to_string(i)).c_str());
    tcm_shutdown();
    return 0;
}
