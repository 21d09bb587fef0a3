"""mneme compiler wrappers, LLVM pass plugin and CMake package.

- ``mneme.instrument.section``: read the embedded kernels (``read_kernels(path)``), stdlib only
- ``mneme.instrument.wrapper``: ``mneme-clang`` / ``mneme-clang++``
- ``mneme.instrument.toolchain``: where clang-22, CUDA and the plugin are
- ``mneme.instrument.commands``: ``mneme inspect`` and ``mneme config``
- ``mneme.instrument.errors``: ``MnemeError``, the root of every mneme exception, and
  ``is_user_error``

Kept import-free: the wrappers import this package at every compile.
"""
