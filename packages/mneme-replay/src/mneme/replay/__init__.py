"""mneme recording database, LLVM JIT binding and replay engine."""
