"""mneme compiler wrappers, LLVM pass plugin and CMake package."""
