# Finds what the torch.distributed backend (python/torch) needs: torch's
# Python package for the interpreter the package is built for, and torch's
# C++ headers and libraries (Debian: python3-torch and libtorch-dev). Sets
# GANG_PYTHON_TORCH and, when found, GANG_TORCH_INCLUDE_DIRS and
# GANG_TORCH_LIBRARIES.
option(GANG_PYTHON_TORCH_WANTED "Build the torch.distributed backend when torch is found" ON)
set(GANG_PYTHON_TORCH OFF)
if(GANG_PYTHON_TORCH_WANTED)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
      "import os, torch; print(os.path.dirname(torch.__file__))"
    OUTPUT_VARIABLE _torch_dir OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _torch_rc ERROR_QUIET)
  find_path(GANG_TORCH_C10D_INCLUDE torch/csrc/distributed/c10d/ProcessGroup.hpp
    HINTS ${_torch_dir}/include)
  find_library(GANG_TORCH_LIB torch HINTS ${_torch_dir}/lib)
  find_library(GANG_TORCH_CPU_LIB torch_cpu HINTS ${_torch_dir}/lib)
  find_library(GANG_TORCH_PYTHON_LIB torch_python HINTS ${_torch_dir}/lib)
  find_library(GANG_C10_LIB c10 HINTS ${_torch_dir}/lib)
  if(_torch_rc EQUAL 0 AND GANG_TORCH_C10D_INCLUDE AND GANG_TORCH_LIB AND
     GANG_TORCH_CPU_LIB AND GANG_TORCH_PYTHON_LIB AND GANG_C10_LIB)
    set(GANG_PYTHON_TORCH ON)
    set(GANG_TORCH_INCLUDE_DIRS ${GANG_TORCH_C10D_INCLUDE}
      ${GANG_TORCH_C10D_INCLUDE}/torch/csrc/api/include)
    set(GANG_TORCH_LIBRARIES ${GANG_TORCH_PYTHON_LIB} ${GANG_TORCH_LIB}
      ${GANG_TORCH_CPU_LIB} ${GANG_C10_LIB})
    message(STATUS "gang: torch.distributed backend: torch at ${_torch_dir}")
  else()
    message(STATUS "gang: torch or its C++ headers not found: no torch backend")
  endif()
endif()
