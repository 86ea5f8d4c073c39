# Checks that an installed kiln can be used from another project: installs the
# built tree at BUILD_DIR into a temporary prefix, builds examples/find-package
# against it (find_package(kiln), kiln::kiln), runs the program and checks what
# it prints; then moves the prefix and builds the same program with the flags
# pkg-config gives for kiln.pc, and runs it. The test install_find_package runs it; by hand, after a build:
#   cmake -DSOURCE_DIR=. -DBUILD_DIR=build -P scripts/check-install.cmake
# Optional: CXX_COMPILER, GENERATOR, MAKE_PROGRAM (those of kiln's build, so the
# program is built as kiln was) and CONFIG (the build type). The temporary
# directory, in BUILD_DIR, is removed whether the check passes or fails.
cmake_minimum_required(VERSION 3.25)

include(${CMAKE_CURRENT_LIST_DIR}/check-steps.cmake)
check_begin(check-install SOURCE_DIR BUILD_DIR)
set(prefix ${work}/prefix)
set(app_build ${work}/app-build)

check_step("installing ${BUILD_DIR} into ${prefix}"
           ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --config ${CONFIG})
file(GLOB_RECURSE installed RELATIVE ${prefix} ${prefix}/*)
foreach(expected include/kiln/kiln.h kilnTargets.cmake kilnConfig.cmake kilnConfigVersion.cmake)
  if(NOT installed MATCHES "(^|;|/)${expected}(;|$)")
    check_fail("the install has no ${expected}" "installed: ${installed}")
  endif()
endforeach()
if(NOT installed MATCHES "(^|;|/)libkiln\\.(a|so)(;|$)")  # static, or shared with BUILD_SHARED_LIBS
  check_fail("the install has no libkiln.a or libkiln.so" "installed: ${installed}")
endif()

check_configure_arguments(configure_arguments ${SOURCE_DIR}/examples/find-package ${app_build} ${prefix})
check_step("configuring examples/find-package against the install" ${CMAKE_COMMAND} ${configure_arguments})
# The package must come from the prefix, not from kiln's build tree.
file(STRINGS ${app_build}/CMakeCache.txt kiln_dir REGEX "^kiln_DIR:")
if(NOT kiln_dir MATCHES "=${prefix}/")
  check_fail("find_package(kiln) did not find the installed package" "${kiln_dir}")
endif()
check_step("building examples/find-package" ${CMAKE_COMMAND} --build ${app_build} --config ${CONFIG})

# A fresh module cache, so that the JIT compiles with the installed library's prelude.
find_program(program kiln-find-package PATHS ${app_build} ${app_build}/${CONFIG} NO_DEFAULT_PATH NO_CACHE)
if(NOT program)
  check_fail("no kiln-find-package program in ${app_build}" "")
endif()
check_step("running kiln-find-package" ${CMAKE_COMMAND} -E env KILN_CACHE_DIR=${work}/jit-cache ${program})
if(NOT step_output MATCHES "the JIT agrees with the standard executor")
  check_fail("kiln-find-package did not report agreement" "${step_output}")
endif()

set(cmake_output "${step_output}")

# The same program built with pkg-config's flags, as a Makefile project would, after moving the install: the .pc
# file finds its prefix from its own place, and the library needs no path of the build or the first prefix.
find_program(pkg_config NAMES pkg-config pkgconf NO_CACHE)
if(NOT pkg_config)
  check_fail("pkg-config is not installed (scripts/install-deps installs pkgconf)" "")
endif()
set(moved ${work}/moved-prefix)
file(RENAME ${prefix} ${moved})
file(GLOB_RECURSE pc_files ${moved}/*/kiln.pc)
if(NOT pc_files)
  check_fail("the install has no kiln.pc" "")
endif()
list(GET pc_files 0 pc_file)
get_filename_component(pc_directory ${pc_file} DIRECTORY)
check_step("asking pkg-config for kiln's flags"
           ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pc_directory} ${pkg_config} --cflags --libs kiln)
string(STRIP "${step_output}" pc_flags)
if(NOT pc_flags MATCHES "-I${moved}/")
  check_fail("pkg-config's include path is not in the moved prefix" "${pc_flags}")
endif()
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
if(NOT CXX_COMPILER)
  set(CXX_COMPILER c++)
endif()
set(pc_program ${work}/kiln-pkg-config)
check_step("building examples/find-package/main.cpp with pkg-config's flags"
           ${CXX_COMPILER} ${SOURCE_DIR}/examples/find-package/main.cpp ${pc_flags} -o ${pc_program})
check_step("running the pkg-config build" ${CMAKE_COMMAND} -E env KILN_CACHE_DIR=${work}/jit-cache-pc
           ${pc_program})
if(NOT step_output MATCHES "the JIT agrees with the standard executor")
  check_fail("the pkg-config build did not report agreement" "${step_output}")
endif()

file(REMOVE_RECURSE ${work})
message(STATUS "check-install: built against the install with find_package and ran:\n${cmake_output}\n"
               "built with pkg-config against the moved install and ran:\n${step_output}")
