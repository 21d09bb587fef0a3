# Native modules for manylinux_2_28 wheels, built on a newer glibc (Debian 12: 2.36, GCC 12).
# Included by the native packages' CMakeLists.txt when MNEME_MANYLINUX is ON
# (scripts/build_wheels.sh sets it); development builds leave it off.
#
#   mneme_manylinux(<target> [OWN_DLSYM])  # a SHARED or MODULE library; OWN_DLSYM: it
#                                          # defines dlsym itself (the recorder)
#
# What it does to the target, each for a reason `objdump -T` showed:
# - libstdc++ linked statically and its symbols kept private (--exclude-libs): GCC 12's
#   libstdc++.so.6 needs GLIBCXX_3.4.30, manylinux_2_28 allows 3.4.24. libgcc_s stays
#   shared: GCC 12's static unwinder needs glibc 2.35's _dl_find_object.
# - glibc_compat.c: hidden definitions that ask glibc only for versions 2.28 has.
# - DT_NEEDED on libpthread.so.0 and libdl.so.2: glibc < 2.34 keeps the pthread and dl
#   functions glibc_compat.c asks for there (on newer glibc those files are empty shims).
include_guard(GLOBAL)
enable_language(C)

foreach(_compat IN ITEMS mneme_glibc_compat mneme_glibc_compat_own_dlsym)
  add_library(${_compat} OBJECT "${CMAKE_CURRENT_LIST_DIR}/glibc_compat.c")
  set_target_properties(${_compat} PROPERTIES POSITION_INDEPENDENT_CODE ON
                        C_VISIBILITY_PRESET hidden)
  # glibc_compat.c defines libc and libm names itself: no builtin may stand in for them.
  target_compile_options(${_compat} PRIVATE -fno-builtin -O2)
endforeach()
target_compile_definitions(mneme_glibc_compat_own_dlsym PRIVATE MNEME_COMPAT_OWN_DLSYM=1)

function(mneme_manylinux target)
  cmake_parse_arguments(PARSE_ARGV 1 _arg "OWN_DLSYM" "" "")
  if(_arg_OWN_DLSYM)
    target_link_libraries(${target} PRIVATE mneme_glibc_compat_own_dlsym)
  else()
    target_link_libraries(${target} PRIVATE mneme_glibc_compat)
  endif()
  target_link_options(${target} PRIVATE
    -static-libstdc++
    "LINKER:--exclude-libs,ALL"
    "LINKER:--push-state,--no-as-needed,-l:libpthread.so.0,-l:libdl.so.2,--pop-state")
endfunction()

# zstd linked statically (a Debian libzstd.so.1 grafted by auditwheel needs glibc 2.34's
# pthread_create); sets MNEME_ZSTD_STATIC_LIBRARY.
find_library(MNEME_ZSTD_STATIC_LIBRARY NAMES libzstd.a)
if(NOT MNEME_ZSTD_STATIC_LIBRARY)
  message(FATAL_ERROR " MNEME_MANYLINUX needs the static zstd library (libzstd.a): apt-get install libzstd-dev")
endif()
