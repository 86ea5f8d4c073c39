# Decides whether kiln is built with CUDA support, from the cache variable
# KILN_CUDA:
#   AUTO (default)  only when a GPU is visible (`nvidia-smi -L` lists one, or
#                   /dev/nvidia0 exists) AND the CUDA toolkit (nvcc, cudart,
#                   cuBLAS, NVRTC) is found; otherwise the build is the plain CPU build,
#                   so CI and GPU-less machines are unchanged.
#   ON              build it; fail clearly if the toolkit is missing (a GPU is not
#                   needed to build: the tests then skip with the reason).
#   OFF             never.
#   SIMULATED       build it against kiln's CUDA simulator (tools/cuda-simulator/):
#                   no GPU and no nvcc needed, only the toolkit's headers and NVRTC;
#                   the CUDA sources are compiled as host C++ and every CUDA test runs
#                   on the simulated device. For testing; never for speed.
# Sets KILN_WITH_CUDA (ON/OFF) in the including scope and, when ON, enables the
# CUDA language for sm_90 machine code plus compute_90 PTX (which newer GPUs JIT
# at load time) unless CMAKE_CUDA_ARCHITECTURES is given.

set(KILN_WITH_CUDA OFF)
set(KILN_CUDA_SIMULATED OFF)

# Sets `out` to TRUE when an NVIDIA GPU is visible, and `why` to what was seen.
function(kiln_gpu_visible out why)
  find_program(KILN_NVIDIA_SMI nvidia-smi)
  if(KILN_NVIDIA_SMI)
    execute_process(COMMAND ${KILN_NVIDIA_SMI} -L RESULT_VARIABLE status OUTPUT_VARIABLE listing
                    ERROR_VARIABLE errors TIMEOUT 30)
    if(status EQUAL 0 AND listing MATCHES "GPU [0-9]+:")
      string(REGEX MATCH "GPU 0:[^\n]*" first "${listing}")
      set(${out} TRUE PARENT_SCOPE)
      set(${why} "nvidia-smi -L: ${first}" PARENT_SCOPE)
      return()
    endif()
    string(STRIP "${errors}${listing}" seen)
    set(reason "nvidia-smi -L failed (${status}): ${seen}")
  else()
    set(reason "no nvidia-smi")
  endif()
  if(EXISTS /dev/nvidia0)
    set(${out} TRUE PARENT_SCOPE)
    set(${why} "/dev/nvidia0 exists" PARENT_SCOPE)
    return()
  endif()
  set(${out} FALSE PARENT_SCOPE)
  set(${why} "${reason}; no /dev/nvidia0" PARENT_SCOPE)
endfunction()

# Sets `out` to TRUE when nvcc works and the CUDA toolkit libraries are found.
macro(kiln_find_cuda_toolkit out)
  include(CheckLanguage)
  check_language(CUDA)
  set(${out} FALSE)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cudart AND TARGET CUDA::cublas AND TARGET CUDA::cublasLt
       AND TARGET CUDA::nvrtc)
      set(${out} TRUE)
    endif()
  endif()
endmacro()

string(TOUPPER "${KILN_CUDA}" kiln_cuda_mode)
if(kiln_cuda_mode STREQUAL "AUTO")
  kiln_gpu_visible(kiln_gpu kiln_gpu_reason)
  if(NOT kiln_gpu)
    message(STATUS "kiln: CUDA support off: no GPU visible (${kiln_gpu_reason}); -DKILN_CUDA=ON builds it anyway")
  else()
    kiln_find_cuda_toolkit(kiln_toolkit)
    if(kiln_toolkit)
      set(KILN_WITH_CUDA ON)
    else()
      message(STATUS "kiln: CUDA support off: a GPU is visible (${kiln_gpu_reason}) but the CUDA toolkit "
                     "(nvcc, cudart, cuBLAS) was not found")
    endif()
  endif()
elseif(kiln_cuda_mode MATCHES "^(ON|TRUE|YES|Y|1)$")
  kiln_find_cuda_toolkit(kiln_toolkit)
  if(NOT kiln_toolkit)
    message(FATAL_ERROR "kiln: KILN_CUDA=ON but the CUDA toolkit was not found: need a working nvcc "
                        "(on PATH or CMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc) and the cudart, cuBLAS, "
                        "cuBLASLt and NVRTC libraries. Install the toolkit, or configure with -DKILN_CUDA=AUTO or OFF.")
  endif()
  set(KILN_WITH_CUDA ON)
elseif(kiln_cuda_mode STREQUAL "SIMULATED")
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::nvrtc)
    message(FATAL_ERROR "kiln: KILN_CUDA=SIMULATED needs the CUDA toolkit's headers and NVRTC (not found)")
  endif()
  set(KILN_WITH_CUDA ON)
  set(KILN_CUDA_SIMULATED ON)
  message(STATUS "kiln: CUDA support on, against the CUDA simulator (host memory, no GPU)")
elseif(NOT kiln_cuda_mode MATCHES "^(OFF|FALSE|NO|N|0)$")
  message(FATAL_ERROR "kiln: KILN_CUDA must be AUTO, ON, OFF or SIMULATED (got '${KILN_CUDA}')")
endif()

if(KILN_WITH_CUDA AND NOT KILN_CUDA_SIMULATED)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
    set(CMAKE_CUDA_ARCHITECTURES 90-real 90-virtual)
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # CUDA sources follow the targets' CXX_STANDARD (20), whose nvcc flag CMake
  # 3.25 does not know (it stops at C++17): tell it.
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  # --fmad=false: no implicit a*b+c -> fma contraction, like -ffp-contract=off on
  #   the CPU, so the standard kernels round as the CPU ones do (random numbers
  #   equal bit for bit, elementwise arithmetic exactly);
  # --expt-relaxed-constexpr: std::numeric_limits<T>::max() and friends in device code.
  # Warnings are errors unless KILN_WERROR is off, as for the C++ sources.
  set(KILN_CUDA_FLAGS --fmad=false --expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra)
  if(KILN_WERROR)
    list(APPEND KILN_CUDA_FLAGS -Werror=all-warnings -Xcompiler=-Werror)
  endif()
  message(STATUS "kiln: CUDA support on (${CMAKE_CUDA_COMPILER_ID} ${CMAKE_CUDA_COMPILER_VERSION}, "
                 "architectures ${CMAKE_CUDA_ARCHITECTURES})")
endif()
