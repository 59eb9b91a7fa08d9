/* The types test_cxx and its exec'd peer share through the heap. */
#ifndef TCM_TEST_SHARED_TYPES_HPP
#define TCM_TEST_SHARED_TYPES_HPP

#include <string>
#include <unordered_map>
#include <vector>

#include "tcm.hpp"

using shm_vector = std::vector<tcm::string, tcm::allocator<tcm::string>>;
using shm_map = std::unordered_map<tcm::string, tcm::string, tcm::string_hash, std::equal_to<tcm::string>,
                                   tcm::allocator<std::pair<const tcm::string, tcm::string>>>;

struct shared_t {
    shm_vector names;
    shm_map attrs;
};

#define ROOT "test_cxx.shared"

#endif
