# proto/: protoc-c output is generated at build time, never committed.
# Needs PROTOC_C (the host's protoc-c); sets PROTO_OUT.
set(PROTO_OUT ${CMAKE_CURRENT_BINARY_DIR}/proto)
file(MAKE_DIRECTORY ${PROTO_OUT})
add_custom_command(
  OUTPUT ${PROTO_OUT}/tcm.pb-c.c ${PROTO_OUT}/tcm.pb-c.h
  COMMAND ${PROTOC_C} --c_out=${PROTO_OUT} -I${CMAKE_CURRENT_SOURCE_DIR}/proto tcm.proto
  DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/proto/tcm.proto
  COMMENT "protoc-c tcm.proto")
# the pprof format tcmctl heap-profile writes
add_custom_command(
  OUTPUT ${PROTO_OUT}/profile.pb-c.c ${PROTO_OUT}/profile.pb-c.h
  COMMAND ${PROTOC_C} --c_out=${PROTO_OUT} -I${CMAKE_CURRENT_SOURCE_DIR}/proto profile.proto
  DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/proto/profile.proto
  COMMENT "protoc-c profile.proto")
