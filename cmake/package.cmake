# `make deb`: one Debian package "hakmem" (CPack's DEB generator) with what
# `cmake --install` puts under /usr: the library and its soname link, the
# static library, the header, the pkg-config and CMake files, the launcher
# and its helper. Included at the end of CMakeLists.txt, after
# cmake/install.cmake, only in a tree configured with CMAKE_INSTALL_PREFIX=/usr:
# there GNUInstallDirs picks Debian's multiarch libdir (lib/x86_64-linux-gnu).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME hakmem)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# The project has no public contact address yet: a placeholder, to set with
# -DHAKMEM_DEB_MAINTAINER="Name <address>".
set(HAKMEM_DEB_MAINTAINER "hakmem maintainers <hakmem@localhost>" CACHE STRING
  "Maintainer field of the Debian package")
set(CPACK_PACKAGE_CONTACT "${HAKMEM_DEB_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)          # hakmem_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# (CPack indents the lines after the first itself)
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "general-purpose malloc replacement for Linux
hakmem replaces malloc/free (and C++ new/delete) in a program linked with
-lhakmem or started with the library preloaded (hakmem run -- cmd).
This package holds the shared and static library, the header, the
pkg-config and CMake files and the hakmem launcher.")
# Depends from dpkg-shlibdeps (dpkg-dev) when it is there, else libc6;
# the shlibs file and ldconfig trigger make the soname known to dpkg.
find_program(HAKMEM_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(HAKMEM_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6 (>= 2.34)")
endif()
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
include(CPack)
