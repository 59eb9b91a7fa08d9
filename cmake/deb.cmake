# The Debian packages (cpack -G DEB), one per install component:
#   libtcm0   libtcm.so.0 and the drop-in libtcm-malloc.so, tcm-malloc(7)
#   libtcm-dev  tcm.h, tcm.hpp, libtcm.so, libtcm.a, tcm.pc, tcm(3)
#   tcmd      tcmd, tcmctl, tcm-kv, the unit, the sysusers file, the
#             settings (conffiles), the other man pages, README, DESIGN
#             and BENCHMARKS
# Each takes over its part of the single package tcm (0.2.0 and before):
# Replaces and Conflicts tcm (<< this version), below. What the packages
# promise to programs (the ABI, the symbols file): packaging/ABI.md.
# Files only a package has (copyright, changelog, lintian overrides) are
# EXCLUDE_FROM_ALL: cpack installs them (it asks for each component by
# name), `cmake --install` does not.

set(TCM_DEB_RELEASE 1) # the Debian revision: packaging changes with the same sources
set(TCM_DEB_VERSION ${PROJECT_VERSION}-${TCM_DEB_RELEASE})
# (no mailing list yet: example.org is a placeholder, RFC 2606)
set(TCM_DEB_MAINTAINER "tcm maintainers <tcm-maintainers@example.org>")
set(TCM_DEB_DIR ${CMAKE_CURRENT_BINARY_DIR}/debian)
set(TCM_DEB_PACKAGES libtcm0 libtcm-dev tcmd)
set(TCM_DEB_COMPONENTS libtcm0 libtcm_dev tcmd)

# README, DESIGN and BENCHMARKS: with the daemon, which is what most of them
# are about and what every user of the heap installs
install(FILES README.md docs/DESIGN.md docs/BENCHMARKS.md
  DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/tcmd COMPONENT tcmd EXCLUDE_FROM_ALL)

# copyright (DEP-5), its license text taken from LICENSE
file(READ LICENSE TCM_LICENSE)
string(FIND "${TCM_LICENSE}" "Permission is hereby granted" at)
string(SUBSTRING "${TCM_LICENSE}" ${at} -1 TCM_LICENSE)
string(STRIP "${TCM_LICENSE}" TCM_LICENSE)
string(REPLACE "\n\n" "\n.\n" TCM_LICENSE "${TCM_LICENSE}")
string(REPLACE "\n" "\n " TCM_LICENSE "${TCM_LICENSE}")
file(WRITE ${TCM_DEB_DIR}/copyright.new
  "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
  "Upstream-Name: tcm\n\n"
  "Files: *\n"
  "Copyright: 2026 the tcm authors\n"
  "License: Expat\n\n"
  "License: Expat\n"
  " ${TCM_LICENSE}\n")
configure_file(${TCM_DEB_DIR}/copyright.new ${TCM_DEB_DIR}/copyright COPYONLY) # (rewritten only when it changes)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS LICENSE)

# changelog.Debian.gz: packaging/changelog.in with this version, gzip -9n
configure_file(packaging/changelog.in ${TCM_DEB_DIR}/changelog.Debian @ONLY)
add_custom_command(OUTPUT ${TCM_DEB_DIR}/changelog.Debian.gz
  COMMAND gzip -9n -c ${TCM_DEB_DIR}/changelog.Debian > ${TCM_DEB_DIR}/changelog.Debian.gz
  DEPENDS ${TCM_DEB_DIR}/changelog.Debian VERBATIM)
add_custom_target(deb_files ALL DEPENDS ${TCM_DEB_DIR}/changelog.Debian.gz)

foreach(package component IN ZIP_LISTS TCM_DEB_PACKAGES TCM_DEB_COMPONENTS)
  install(FILES ${TCM_DEB_DIR}/copyright ${TCM_DEB_DIR}/changelog.Debian.gz
    DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${package} COMPONENT ${component} EXCLUDE_FROM_ALL)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/packaging/lintian/${package})
    install(FILES packaging/lintian/${package}
      DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides COMPONENT ${component} EXCLUDE_FROM_ALL)
  endif()
endforeach()

# control files. libtcm0: its symbols (packaging/libtcm0.symbols, which
# install.deb holds to what libtcm.so.0 exports) and ldconfig's trigger;
# its shlibs are CPack's (CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS below).
file(MAKE_DIRECTORY ${TCM_DEB_DIR}/libtcm0 ${TCM_DEB_DIR}/tcmd)
configure_file(packaging/libtcm0.symbols ${TCM_DEB_DIR}/libtcm0/symbols COPYONLY)
file(WRITE ${TCM_DEB_DIR}/libtcm0/triggers "activate-noawait ldconfig\n")
# tcmd: the settings files are the admin's (an edit survives an upgrade),
# and postinst makes the user tcm
file(WRITE ${TCM_DEB_DIR}/tcmd/conffiles
  "${CMAKE_INSTALL_FULL_SYSCONFDIR}/tcm/tcmd.conf\n${CMAKE_INSTALL_FULL_SYSCONFDIR}/default/tcmd\n")
configure_file(packaging/postinst.in ${TCM_DEB_DIR}/tcmd/postinst @ONLY
  FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)

set(CPACK_PACKAGE_NAME tcm)
set(CPACK_PACKAGE_VENDOR "tcm")
set(CPACK_PACKAGE_CONTACT "${TCM_DEB_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ${TCM_DEB_COMPONENTS}) # (not doc: the packages have their own copies, above)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE ${TCM_DEB_RELEASE})
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# tcm-kv links libtcm.so.0, which is in libtcm0, not on this system:
# dpkg-shlibdeps finds it in the build tree (tcmd's Depends names libtcm0 itself)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_CURRENT_BINARY_DIR})
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=") # (the symbols file is finer still)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# The old package tcm goes wholly: its files are split among the three.
# Replaces lets them take its files (its conffiles too, with the admin's
# edits); Conflicts makes plain `dpkg -i` remove tcm on the way (Debian
# Policy 7.6.2). Breaks in its place would make dpkg -i refuse ("installing
# libtcm0 would break tcm, and deconfiguration is not permitted") unless
# given --auto-deconfigure; apt copes with either.
foreach(package component IN ZIP_LISTS TCM_DEB_PACKAGES TCM_DEB_COMPONENTS)
  string(TOUPPER ${component} C)
  set(CPACK_DEBIAN_${C}_PACKAGE_NAME ${package})
  set(CPACK_DEBIAN_${C}_PACKAGE_REPLACES "tcm (<< ${TCM_DEB_VERSION})")
  set(CPACK_DEBIAN_${C}_PACKAGE_CONFLICTS "tcm (<< ${TCM_DEB_VERSION})")
endforeach()

# the two library packages' descriptions begin alike
set(TCM_DEB_LIBTCM_ABOUT "libtcm is the client library of tcm, a thread-caching malloc whose shared
tiers live in a daemon (tcmd): processes attached to one tcmd allocate from
and free into one heap, mapped at the same address in each, so a pointer is
valid in all of them.
.
")
set(CPACK_DEBIAN_LIBTCM0_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_LIBTCM0_DESCRIPTION "shared-memory heap service for multi-process servers (library)
${TCM_DEB_LIBTCM_ABOUT}This package has libtcm.so.0 and libtcm-malloc.so, the drop-in that makes
tcm the malloc of any program (LD_PRELOAD), with a heap of the process's
own.")
set(CPACK_DEBIAN_LIBTCM0_PACKAGE_CONTROL_EXTRA ${TCM_DEB_DIR}/libtcm0/symbols ${TCM_DEB_DIR}/libtcm0/triggers)

set(CPACK_DEBIAN_LIBTCM_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_LIBTCM_DEV_PACKAGE_DEPENDS "libtcm0 (= ${TCM_DEB_VERSION}), libprotobuf-c-dev")
set(CPACK_DEBIAN_LIBTCM_DEV_DESCRIPTION "shared-memory heap service for multi-process servers (development files)
${TCM_DEB_LIBTCM_ABOUT}This package has what building a program with libtcm needs: tcm.h, tcm.hpp
(tcm::allocator for the standard containers), the static library, the
pkg-config file tcm and the manual page tcm(3).")

set(CPACK_DEBIAN_TCMD_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_TCMD_PACKAGE_DEPENDS "libtcm0 (>= ${TCM_DEB_VERSION})")
set(CPACK_DEBIAN_TCMD_DESCRIPTION "shared-memory heap service for multi-process servers (daemon)
tcmd creates a shared-memory heap, owns its page heap and central free
lists and serves the processes attached to it (through libtcm) on lock-free
shared-memory rings. The heap outlives the daemon: a restarted tcmd adopts
it.
.
This package has tcmd with its systemd unit and settings files, tcmctl
(the control command: stats, clients, sizing, health) and tcm-kv, a
pre-fork Redis-protocol cache whose workers share one table in the heap.")
set(CPACK_DEBIAN_TCMD_PACKAGE_CONTROL_EXTRA ${TCM_DEB_DIR}/tcmd/postinst ${TCM_DEB_DIR}/tcmd/conffiles)
include(CPack)
