# The Windows build (cmake -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64.cmake):
# the platform layer (shm/prim_win.c), tcmd's heap, libtcm, and the tests
# that run under Wine (tests/windows_test.sh builds this and runs them).
# Debian packages libuv and protobuf-c only for Linux; scripts/setup.sh
# fetches their Debian sources into .deps/, and with them tcmd, tcmctl and
# the whole of libtcm are built for Windows too (DESIGN.md, "The Windows
# backend", says what of them runs there yet).
set(TCM_WIN_DEPS ${CMAKE_SOURCE_DIR}/.deps CACHE PATH "Debian's libuv1 and protobuf-c sources (scripts/setup.sh)")
set(UV_SRC ${TCM_WIN_DEPS}/libuv1-1.44.2)
set(PBC_SRC ${TCM_WIN_DEPS}/protobuf-c-1.4.1)
set(TCM_WIN_CONTROL OFF)
if(EXISTS ${UV_SRC}/CMakeLists.txt AND EXISTS ${PBC_SRC}/protobuf-c/protobuf-c.c)
  set(TCM_WIN_CONTROL ON)
  # their code, their warnings: added before tcm's own -Werror
  set(LIBUV_BUILD_TESTS OFF CACHE BOOL "" FORCE)
  set(LIBUV_BUILD_BENCH OFF CACHE BOOL "" FORCE)
  add_subdirectory(${UV_SRC} libuv EXCLUDE_FROM_ALL)
  target_compile_options(uv_a PRIVATE -w)
  add_library(protobuf_c STATIC ${PBC_SRC}/protobuf-c/protobuf-c.c)
  target_include_directories(protobuf_c PUBLIC ${PBC_SRC})
  target_compile_options(protobuf_c PRIVATE -w)
else()
  message(STATUS "no libuv/protobuf-c sources in ${TCM_WIN_DEPS} (scripts/setup.sh): tcmd, tcmctl and the handshake are not built")
endif()

add_compile_options(-Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-missing-field-initializers)
if(TCM_WERROR)
  add_compile_options(-Werror)
endif()
add_compile_definitions(TCM_ASSERT_LEVEL=3 _WIN32_WINNT=0x0602 __USE_MINGW_ANSI_STDIO=1) # C99 printf: %zu, %llu
# one self-contained .exe per test: no mingw runtime DLLs to find under Wine
add_link_options(-static)

add_library(tcm_platform STATIC shm/prim_win.c common/layout.c common/util.c)
target_include_directories(tcm_platform PUBLIC common shm)
target_link_libraries(tcm_platform PUBLIC pthread synchronization bcrypt psapi advapi32)

# tcmd's heap: the page heap and the central lists, as tcmd runs them
add_library(tcm_heap STATIC daemon/heap.c daemon/pageheap.c daemon/central.c daemon/objrec.c daemon/log.c daemon/crash.c
  daemon/validate_heap.c daemon/shares.c daemon/samples.c)
target_include_directories(tcm_heap PUBLIC daemon)
target_link_libraries(tcm_heap PUBLIC tcm_platform)

if(TCM_WIN_CONTROL)
  find_program(PROTOC_C protoc-c REQUIRED) # the host's, from Debian
  include(cmake/proto.cmake)
  add_library(tcm_proto STATIC proto/frame.c proto/views.c ${PROTO_OUT}/tcm.pb-c.c)
  target_include_directories(tcm_proto PUBLIC proto ${PROTO_OUT})
  target_link_libraries(tcm_proto PUBLIC tcm_platform protobuf_c)

  add_library(tcmd_core STATIC daemon/config.c daemon/control.c daemon/transport.c daemon/access.c
    daemon/clientwatch.c daemon/handlers.c daemon/heapthread.c
    daemon/mailbox.c daemon/metrics.c daemon/reclaim.c daemon/recovery.c daemon/migrate.c daemon/requests.c daemon/continuation.c daemon/quota.c daemon/heapfull.c daemon/rows.c
    daemon/segments.c daemon/stats.c daemon/validate.c daemon/holders.c daemon/decay.c daemon/huge.c daemon/roots.c daemon/profile.c)
  target_link_libraries(tcmd_core PUBLIC tcm_heap tcm_proto uv_a)
  add_executable(tcmd daemon/main.c)
  target_link_libraries(tcmd PRIVATE tcmd_core)
  add_executable(tcmctl cli/tcmctl.c cli/heapprof_none.c) # no libdw nor zlib here: no heap-profile
  target_link_libraries(tcmctl PRIVATE tcm_proto)

  add_library(tcm STATIC client/tcm.c client/tcache.c client/channel.c client/background.c client/large.c
    client/xfer.c client/lifecycle.c client/reconnect.c client/state.c client/diag.c client/ctlsock.c client/fork.c
    client/given.c client/profile.c)
  target_include_directories(tcm PUBLIC client/include PRIVATE client)
  target_link_libraries(tcm PUBLIC tcm_proto)
  add_executable(test_no_daemon tests/windows/test_no_daemon.c)
  target_include_directories(test_no_daemon PRIVATE tests/common)
  target_link_libraries(test_no_daemon PRIVATE tcm)
  add_test(NAME win.no_daemon COMMAND test_no_daemon)
  add_executable(test_e2e tests/windows/test_e2e.c)
  target_include_directories(test_e2e PRIVATE tests/common)
  target_link_libraries(test_e2e PRIVATE tcm tcm_cases)
  add_dependencies(test_e2e tcmd)
  add_test(NAME win.e2e COMMAND test_e2e)
  set_tests_properties(win.e2e PROPERTIES TIMEOUT 300)
  add_test(NAME win.tcmd_help COMMAND tcmd --help)
  set_tests_properties(win.tcmd_help PROPERTIES PASS_REGULAR_EXPRESSION "usage: tcmd")
  add_test(NAME win.tcmd_background COMMAND tcmd --socket /tcm-test-background --name bgtest)
  set_tests_properties(win.tcmd_background PROPERTIES PASS_REGULAR_EXPRESSION "run it with --foreground")
  add_test(NAME win.tcmctl_no_daemon COMMAND tcmctl --socket /tcm-test-nobody-serves-this ping)
  set_tests_properties(win.tcmctl_no_daemon PROPERTIES PASS_REGULAR_EXPRESSION "cannot connect to tcmd")
else()
  # libtcm's caches without the handshake (client/lifecycle.c, reconnect.c and ctlsock.c need protobuf-c)
  add_library(tcm STATIC client/tcm.c client/tcache.c client/channel.c client/background.c client/large.c
    client/xfer.c client/state.c client/diag.c client/given.c client/profile.c)
  target_include_directories(tcm PUBLIC client/include PRIVATE client)
  target_link_libraries(tcm PUBLIC tcm_platform)
endif()

add_library(tcm_cases STATIC tests/common/cases.c tests/common/spawn.c)
target_include_directories(tcm_cases PUBLIC tests/common)
foreach(t classes pageheap ring shm)
  add_executable(test_${t} tests/unit/test_${t}.c)
  target_link_libraries(test_${t} PRIVATE tcm_heap tcm_cases)
  add_test(NAME win.${t} COMMAND test_${t})
endforeach()
set_tests_properties(win.ring win.shm PROPERTIES TIMEOUT 300)
