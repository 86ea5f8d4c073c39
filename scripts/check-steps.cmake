# What the scripts that build a project of their own against kiln share (check-install.cmake,
# check-export.cmake, check-subproject.cmake): their start, steps that stop the check with their output, and the
# arguments that configure such a project as kiln was built.

# Starts check `tag`: stops unless every variable named after it was passed (-D<name>=...), makes SOURCE_DIR and
# BUILD_DIR absolute, defaults CONFIG to Release, and sets `work` to a new empty temporary directory in BUILD_DIR
# (removed when a step fails; the script removes it when it passes).
macro(check_begin tag)
  set(check_tag ${tag})
  foreach(required ${ARGN})
    if(NOT DEFINED ${required})
      message(FATAL_ERROR "${check_tag}: pass -D${required}=<path>")
    endif()
  endforeach()
  get_filename_component(SOURCE_DIR "${SOURCE_DIR}" ABSOLUTE)
  get_filename_component(BUILD_DIR "${BUILD_DIR}" ABSOLUTE)
  if(NOT CONFIG)
    set(CONFIG Release)
  endif()
  string(RANDOM LENGTH 8 ALPHABET abcdefghijklmnopqrstuvwxyz0123456789 suffix)
  set(work ${BUILD_DIR}/${check_tag}-${suffix})
  file(REMOVE_RECURSE ${work})
  file(MAKE_DIRECTORY ${work})
endmacro()

# Removes the temporary directory, then stops with `message` and the step's output.
function(check_fail message output)
  file(REMOVE_RECURSE ${work})
  message(FATAL_ERROR "${check_tag}: ${message}\n${output}")
endfunction()

# Runs one step (a command after the step's name), failing the check if it fails; its output is `step_output`.
function(check_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output
                  TIMEOUT 300)
  if(NOT status EQUAL 0)
    list(JOIN ARGN " " command)
    check_fail("${name} failed (${status}): ${command}" "${output}")
  endif()
  set(step_output "${output}" PARENT_SCOPE)
endfunction()

# Sets `variable` to the arguments configuring the project in `source` into `build` against the install at
# `prefix`, with kiln's build type, generator, make program and C++ compiler (CONFIG, GENERATOR, MAKE_PROGRAM,
# CXX_COMPILER, when the script was given them); further arguments are appended.
function(check_configure_arguments variable source build prefix)
  set(arguments -S ${source} -B ${build} -DCMAKE_BUILD_TYPE=${CONFIG} -DCMAKE_PREFIX_PATH=${prefix}
                -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF ${ARGN})
  if(GENERATOR)
    list(APPEND arguments -G ${GENERATOR})
  endif()
  if(MAKE_PROGRAM)
    list(APPEND arguments -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
  endif()
  if(CXX_COMPILER)
    list(APPEND arguments -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
  endif()
  set(${variable} ${arguments} PARENT_SCOPE)
endfunction()
