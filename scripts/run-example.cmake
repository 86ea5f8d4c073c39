# Runs one example program (examples/) and checks what it printed: the tests example_* in
# tests/CMakeLists.txt run it.
#   cmake -DPROGRAM=<path> [-DARGUMENTS=<a,b,...>] [-DEMPTY_DIRECTORY=<dir>]
#         -DEXPECT_1=<regex> [-DEXPECT_2=<regex> ... -DEXPECT_9=<regex>] -P scripts/run-example.cmake
# Fails when the program exits with another status than 0, or when its output (standard output
# and standard error together) does not match every EXPECT_<n> (CMake regular expressions, each
# matched anywhere in the output). A semicolon would split the test's command line: ARGUMENTS are
# comma-separated, and a pattern matches a ';' with '.'. EMPTY_DIRECTORY is removed and created
# empty first (for KILN_DUMP_TO). ctest's PASS_REGULAR_EXPRESSION is not used because it ignores
# the exit status and passes on any one of its patterns.
cmake_minimum_required(VERSION 3.25)

if(NOT DEFINED PROGRAM OR NOT DEFINED EXPECT_1)
  message(FATAL_ERROR "run-example: pass -DPROGRAM=<path> and at least -DEXPECT_1=<regex>")
endif()
set(arguments "")
if(DEFINED ARGUMENTS AND NOT ARGUMENTS STREQUAL "")
  string(REPLACE "," ";" arguments "${ARGUMENTS}")
endif()
if(DEFINED EMPTY_DIRECTORY)
  file(REMOVE_RECURSE "${EMPTY_DIRECTORY}")
  file(MAKE_DIRECTORY "${EMPTY_DIRECTORY}")
endif()

execute_process(COMMAND "${PROGRAM}" ${arguments} RESULT_VARIABLE status OUTPUT_VARIABLE output
                ERROR_VARIABLE output)
message("${output}")
get_filename_component(name "${PROGRAM}" NAME)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "run-example: ${name} exited with status ${status}")
endif()
foreach(index RANGE 1 9)
  if(DEFINED EXPECT_${index})
    if(NOT output MATCHES "${EXPECT_${index}}")
      message(FATAL_ERROR "run-example: the output of ${name} does not match '${EXPECT_${index}}'")
    endif()
  endif()
endforeach()
message("run-example: ${name} passed its checks")
