# find_package(mneme) for projects that want recordable CUDA/HIP executables.
#
#   find_package(mneme REQUIRED)      # -DCMAKE_PREFIX_PATH=$(mneme config cmakedir)
#   add_executable(app app.cu)
#   add_mneme(app)                    # compiled and linked through mneme-clang++
#
# Provides: MNEME_FOUND, MNEME_VERSION, MNEME_CXX (mneme-clang++), MNEME_CC (mneme-clang),
# MNEME_PLUGIN (the LLVM pass plugin), MNEME_INCLUDE_DIR, the function add_mneme(<target>...).
#
# add_mneme() sets the targets' <LANG>_COMPILER_LAUNCHER and <LANG>_LINKER_LAUNCHER to
# `mneme-clang++ --mneme-launcher`, so whichever clang-22 the project compiles with runs
# the mneme pass and gets the kernel section, and CUDA_RUNTIME_LIBRARY to Shared (the
# recorder interposes libcudart.so at run time with LD_PRELOAD; CMake's CUDA language
# links the static runtime by default). Nothing else is linked in. A project whose
# compilers already are mneme-clang/mneme-clang++ needs add_mneme() only for the CUDA
# runtime setting (calling it is harmless).

get_filename_component(_mneme_pkg_dir "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
set(MNEME_VERSION 0.1.0)
set(MNEME_PLUGIN "${_mneme_pkg_dir}/lib/libMnemeInstrument.so")
set(MNEME_INCLUDE_DIR "${_mneme_pkg_dir}/include")

# The wrapper scripts live in the bin/ folder of the Python environment mneme-instrument
# is installed in (<env>/lib/pythonX.Y/site-packages/mneme/instrument/cmake -> <env>/bin).
get_filename_component(_mneme_env_bin "${CMAKE_CURRENT_LIST_DIR}/../../../../../../bin" ABSOLUTE)
find_program(MNEME_CXX NAMES mneme-clang++ HINTS "${_mneme_env_bin}" ENV PATH NO_CACHE)
find_program(MNEME_CC NAMES mneme-clang HINTS "${_mneme_env_bin}" ENV PATH NO_CACHE)

set(mneme_FOUND TRUE)
if(NOT EXISTS "${MNEME_PLUGIN}")
  set(mneme_FOUND FALSE)
  set(mneme_NOT_FOUND_MESSAGE "mneme: the pass plugin ${MNEME_PLUGIN} is missing; reinstall mneme-instrument")
elseif(NOT MNEME_CXX)
  set(mneme_FOUND FALSE)
  set(mneme_NOT_FOUND_MESSAGE "mneme: mneme-clang++ is not on PATH; activate the Python environment where mneme-instrument is installed")
endif()
set(MNEME_FOUND ${mneme_FOUND})

function(add_mneme)
  if(ARGC EQUAL 0)
    message(FATAL_ERROR "add_mneme: name at least one target")
  endif()
  foreach(_target IN LISTS ARGN)
    if(NOT TARGET ${_target})
      message(FATAL_ERROR "add_mneme: ${_target} is not a target")
    endif()
    # the recorder interposes libcudart.so: CMake's CUDA language links cudart_static by default
    set_property(TARGET ${_target} PROPERTY CUDA_RUNTIME_LIBRARY Shared)
    foreach(_lang IN ITEMS C CXX CUDA HIP)
      set_property(TARGET ${_target} PROPERTY ${_lang}_COMPILER_LAUNCHER "${MNEME_CXX};--mneme-launcher")
      set_property(TARGET ${_target} PROPERTY ${_lang}_LINKER_LAUNCHER "${MNEME_CXX};--mneme-launcher")
    endforeach()
  endforeach()
endfunction()
