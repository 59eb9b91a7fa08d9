# The Windows build (cmake -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64.cmake):
# the platform layer (shm/prim_win.c), the daemon's heap and the client's
# caches, and the tests that need neither libuv nor protobuf-c, which Debian
# does not package for mingw: the control channel, and so tcmd's main loop,
# the handshake and tcmctl, are not built here (DESIGN.md, "The Windows
# backend"). tests/windows_test.sh builds this and runs its tests under Wine.
add_compile_options(-Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-missing-field-initializers)
if(TCM_WERROR)
  add_compile_options(-Werror)
endif()
add_compile_definitions(TCM_ASSERT_LEVEL=3 _WIN32_WINNT=0x0602)
# one self-contained .exe per test: no mingw runtime DLLs to find under Wine
add_link_options(-static)

add_library(tcm_platform STATIC shm/prim_win.c common/layout.c common/util.c)
target_include_directories(tcm_platform PUBLIC common shm)
target_link_libraries(tcm_platform PUBLIC pthread synchronization bcrypt psapi advapi32)

# tcmd's heap: the page heap and the central lists, as tcmd runs them
add_library(tcm_heap STATIC daemon/heap.c daemon/pageheap.c daemon/central.c daemon/log.c daemon/crash.c
  daemon/validate_heap.c)
target_include_directories(tcm_heap PUBLIC daemon)
target_link_libraries(tcm_heap PUBLIC tcm_platform)

# libtcm's caches (thread cache, transfer tier, page-run cache, channel):
# everything but the handshake (client/lifecycle.c, protobuf-c), compiled
# for Windows so that they keep to the platform layer
add_library(tcm_client_core STATIC client/tcm.c client/tcache.c client/channel.c client/background.c
  client/large.c client/xfer.c)
target_include_directories(tcm_client_core PRIVATE client client/include)
target_link_libraries(tcm_client_core PUBLIC tcm_platform)

add_library(tcm_cases STATIC tests/common/cases.c tests/common/spawn.c)
target_include_directories(tcm_cases PUBLIC tests/common)
foreach(t classes pageheap ring shm)
  add_executable(test_${t} tests/unit/test_${t}.c)
  target_link_libraries(test_${t} PRIVATE tcm_heap tcm_cases)
  add_test(NAME win.${t} COMMAND test_${t})
endforeach()
set_tests_properties(win.ring win.shm PROPERTIES TIMEOUT 300)
