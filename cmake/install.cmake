# Installation rules: header, shared + static library, pkg-config file,
# CMake package (find_package(hakmem) -> hakmem::hakmem, hakmem::hakmem_static)
# and the `hakmem` launcher script.  Included at the end of CMakeLists.txt.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(HAKMEM_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/hakmem
  CACHE STRING "where hakmemConfig.cmake is installed (relative to the prefix)")

# hakmem_obj is not exported: both libraries take its object files via
# $<TARGET_OBJECTS:hakmem_obj>, so nothing links against it.
install(TARGETS hakmem hakmem_static
  EXPORT hakmemTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/hakmem.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

install(EXPORT hakmemTargets
  NAMESPACE hakmem::
  FILE hakmemTargets.cmake
  DESTINATION ${HAKMEM_INSTALL_CMAKEDIR})

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/hakmemConfig.cmake.in
  ${PROJECT_BINARY_DIR}/hakmemConfig.cmake
  INSTALL_DESTINATION ${HAKMEM_INSTALL_CMAKEDIR})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/hakmemConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/hakmemConfig.cmake
  ${PROJECT_BINARY_DIR}/hakmemConfigVersion.cmake
  DESTINATION ${HAKMEM_INSTALL_CMAKEDIR})

# pkg-config: the file is finished at install time so that
# `cmake --install build --prefix X` writes X into it, not the
# configure-time CMAKE_INSTALL_PREFIX.
foreach(_d LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_d}}")
    set(HAKMEM_PC_${_d} "${CMAKE_INSTALL_${_d}}")
  else()
    set(HAKMEM_PC_${_d} "\${prefix}/${CMAKE_INSTALL_${_d}}")
  endif()
endforeach()
set(HAKMEM_PC_PREFIX "@HAKMEM_PC_PREFIX@")  # filled in at install time
configure_file(${PROJECT_SOURCE_DIR}/cmake/hakmem.pc.in
  ${PROJECT_BINARY_DIR}/pkgconfig/hakmem.pc.in @ONLY)
install(CODE "
  file(READ \"${PROJECT_BINARY_DIR}/pkgconfig/hakmem.pc.in\" _hak_pc)
  string(REPLACE \"@HAKMEM_PC_PREFIX@\" \"\${CMAKE_INSTALL_PREFIX}\" _hak_pc \"\${_hak_pc}\")
  file(WRITE \"${PROJECT_BINARY_DIR}/pkgconfig/hakmem.pc\" \"\${_hak_pc}\")
")
install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/hakmem.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The launcher: it finds libhakmem.so and its helper relative to its own
# location at run time (bin/../lib, bin/../libexec/hakmem), so it keeps
# working when installed with --prefix.
set(HAKMEM_HELPERDIR ${CMAKE_INSTALL_LIBEXECDIR}/hakmem)
file(RELATIVE_PATH HAKMEM_BINDIR_TO_LIBDIR
  /prefix/${CMAKE_INSTALL_BINDIR} /prefix/${CMAKE_INSTALL_LIBDIR})
file(RELATIVE_PATH HAKMEM_BINDIR_TO_HELPERDIR
  /prefix/${CMAKE_INSTALL_BINDIR} /prefix/${HAKMEM_HELPERDIR})
file(RELATIVE_PATH _hak_helper_to_lib
  /prefix/${HAKMEM_HELPERDIR} /prefix/${CMAKE_INSTALL_LIBDIR})
set_target_properties(hakmem_options PROPERTIES INSTALL_RPATH "$ORIGIN/${_hak_helper_to_lib}")
install(TARGETS hakmem_options RUNTIME DESTINATION ${HAKMEM_HELPERDIR})
configure_file(${PROJECT_SOURCE_DIR}/scripts/hakmem.in
  ${PROJECT_BINARY_DIR}/hakmem-launcher @ONLY)
install(PROGRAMS ${PROJECT_BINARY_DIR}/hakmem-launcher
  DESTINATION ${CMAKE_INSTALL_BINDIR} RENAME hakmem)
