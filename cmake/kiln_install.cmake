# `cmake --install <build> --prefix <dir>`: the kiln library, its public headers,
# a CMake package and a pkg-config file, so that another project can
#   find_package(kiln REQUIRED)
#   target_link_libraries(app PRIVATE kiln::kiln)
# or build with `pkg-config --cflags --libs kiln` (examples/find-package, both
# ways checked by the test install_find_package). Nothing
# else is installed: no tools, tests or examples. The JIT needs no files at run
# time: its prelude is compiled into the library (generated/cpu_prelude.cpp),
# OpenBLAS is opened with dlopen when there, and modules go to KILN_CACHE_DIR.
#
# The library is compiled with the flags of this build (KILN_NATIVE: for this
# machine's CPU), so configure with -DKILN_NATIVE=OFF for a package that runs on
# other x86-64 CPUs.

if(KILN_CUDA_SIMULATED)
  # The simulator is a test device (tools/cuda-simulator/README.md), not installed.
  message(STATUS "kiln: no install rules: a KILN_CUDA=SIMULATED build links the CUDA simulator, which is "
                 "not installed")
  return()
endif()

include(CMakePackageConfigHelpers)
set(KILN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)

install(TARGETS kiln EXPORT kilnTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
                                         LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT kilnTargets FILE kilnTargets.cmake NAMESPACE kiln:: DESTINATION ${KILN_INSTALL_CMAKEDIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${KILN_INSTALL_CMAKEDIR})
# Before 1.0 a minor version may change the API: 0.1 satisfies find_package(kiln 0.1), not 0.2.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake VERSION ${PROJECT_VERSION}
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${KILN_INSTALL_CMAKEDIR})

# The pkg-config file. The library is static by default, so everything it links goes in Libs (a shared kiln
# needs them too: it does not re-export them); the usage requirements of kiln::kiln, spelled as flags.
file(RELATIVE_PATH KILN_PC_PREFIX_FROM_PCFILEDIR /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" KILN_PC_PREFIX_FROM_PCFILEDIR "${KILN_PC_PREFIX_FROM_PCFILEDIR}")
set(KILN_PC_CFLAGS "")
set(KILN_PC_LIBS " -pthread")
foreach(library ${CMAKE_DL_LIBS})
  string(APPEND KILN_PC_LIBS " -l${library}")
endforeach()
if(KILN_WITH_ZLIB)
  string(APPEND KILN_PC_LIBS " -lz")
endif()
if(KILN_WITH_CUDA)
  string(APPEND KILN_PC_CFLAGS " -DKILN_HAVE_CUDA=1")
  string(APPEND KILN_PC_LIBS " -L${CUDAToolkit_LIBRARY_DIR} -lcudart -lcublas -lcublasLt -lnvrtc")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/kiln.pc.in ${PROJECT_BINARY_DIR}/kiln.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kiln.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
