# Checks that kiln used as another project's subproject (examples/fetch-content: FetchContent, as
# add_subdirectory) configures with the library and none of kiln's tests, tools or examples: configures it into
# a temporary directory and reads its list of targets. Building it is building kiln (minutes), which the
# install tests already do; this checks what a user's build would contain. The test subproject_configure runs it:
#   cmake -DSOURCE_DIR=. -DBUILD_DIR=build -P scripts/check-subproject.cmake
# Optional: CXX_COMPILER, GENERATOR, MAKE_PROGRAM and CONFIG, as for check-install.cmake.
cmake_minimum_required(VERSION 3.25)

include(${CMAKE_CURRENT_LIST_DIR}/check-steps.cmake)
check_begin(check-subproject SOURCE_DIR BUILD_DIR)

check_configure_arguments(configure_arguments ${SOURCE_DIR}/examples/fetch-content ${work}/build ${work}/no-prefix
                          -DKILN_SOURCE_DIR=${SOURCE_DIR} -DFETCHCONTENT_FULLY_DISCONNECTED=ON)
check_step("configuring examples/fetch-content" ${CMAKE_COMMAND} ${configure_arguments})
set(configure_output "${step_output}")
check_step("listing its targets" ${CMAKE_COMMAND} --build ${work}/build --target help)
set(targets "${step_output}")
foreach(wanted kiln kiln-fetch-content)
  if(NOT targets MATCHES "(^|[ \n])${wanted}([ \n]|$)")
    check_fail("the project has no target ${wanted}" "${targets}")
  endif()
endforeach()
foreach(unwanted kiln-bench kiln-dump kiln-fuzz kiln_unit_tests kiln_jit_tests digits-mlp seed)
  if(targets MATCHES "(^|[ \n])${unwanted}([ \n]|$)")
    check_fail("kiln's ${unwanted} is built in another project's build" "${targets}")
  endif()
endforeach()

file(REMOVE_RECURSE ${work})
message(STATUS "check-subproject: examples/fetch-content configures kiln with the library alone")
