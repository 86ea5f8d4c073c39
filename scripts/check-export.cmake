# Checks ahead-of-time export end to end: kiln-export-writer (tests/export/export_writer.cpp) exports three
# functions with kiln::export_function and saves their inputs and the JIT's outputs; kiln is installed into a
# temporary prefix; tests/export/program, a project of its own, is built against the install and the exported
# files (find_package(kiln), include(<name>.cmake)) and run with no C++ compiler and an empty module cache: it
# checks that every output equals the JIT's bit for bit, through the C++ and the C entry points. The test
# export_program runs it; by hand, after a build:
#   cmake -DSOURCE_DIR=. -DBUILD_DIR=build -DWRITER=build/tests/kiln-export-writer -P scripts/check-export.cmake
# Optional: CXX_COMPILER, GENERATOR, MAKE_PROGRAM and CONFIG, as for check-install.cmake. The temporary
# directory, in BUILD_DIR, is removed whether the check passes or fails.
cmake_minimum_required(VERSION 3.25)

include(${CMAKE_CURRENT_LIST_DIR}/check-steps.cmake)
check_begin(check-export SOURCE_DIR BUILD_DIR WRITER)
set(exported ${work}/exported)
set(prefix ${work}/prefix)
set(program_build ${work}/program-build)

check_step("exporting with kiln-export-writer"
           ${CMAKE_COMMAND} -E env KILN_CACHE_DIR=${work}/jit-cache ${WRITER} ${exported})
set(writer_output "${step_output}")
foreach(name seed layer empty)
  foreach(file ${name}.h ${name}_c.h ${name}.cpp ${name}_kernels.cpp ${name}.cmake)
    if(NOT EXISTS ${exported}/${file})
      check_fail("kiln-export-writer wrote no ${file}" "${writer_output}")
    endif()
  endforeach()
endforeach()

check_step("installing ${BUILD_DIR} into ${prefix}"
           ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --config ${CONFIG})
check_configure_arguments(configure_arguments ${SOURCE_DIR}/tests/export/program ${program_build} ${prefix}
                          -DEXPORTED=${exported})
check_step("configuring tests/export/program" ${CMAKE_COMMAND} ${configure_arguments})
check_step("building tests/export/program" ${CMAKE_COMMAND} --build ${program_build} --config ${CONFIG})
find_program(program exported-program PATHS ${program_build} ${program_build}/${CONFIG} NO_DEFAULT_PATH NO_CACHE)
if(NOT program)
  check_fail("no exported-program in ${program_build}" "")
endif()

# No compiler (KILN_CXX names a program that does not exist) and a module cache that must stay empty: the
# exported functions need neither.
set(empty_cache ${work}/empty-cache)
file(MAKE_DIRECTORY ${empty_cache})
check_step("running exported-program"
           ${CMAKE_COMMAND} -E env KILN_CXX=${work}/no-such-compiler KILN_CACHE_DIR=${empty_cache}
           ${program} ${exported})
if(NOT step_output MATCHES "exported functions match the JIT")
  check_fail("exported-program did not report a match" "${step_output}")
endif()
file(GLOB cached ${empty_cache}/*)
if(cached)
  check_fail("the exported program wrote to the module cache" "${cached}")
endif()

file(REMOVE_RECURSE ${work})
message(STATUS "check-export: ${writer_output}built a program of its own against them and ran it:\n${step_output}")
