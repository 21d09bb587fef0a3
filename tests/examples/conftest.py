import os
import shutil

import pytest
from examples_support import examples_build, require_toolchain


@pytest.fixture(scope="session")
def examples_build_result(tmp_path_factory):
    """The examples configured and built with CMake through find_package(mneme) (a
    BuildResult), or None where MNEME_EXAMPLES_PREBUILT names already-built programs."""
    if os.environ.get("MNEME_EXAMPLES_PREBUILT"):
        return None
    require_toolchain()
    if examples_build._tool("cmake") is None or examples_build._tool("ninja") is None:
        pytest.skip("cmake / ninja are not installed")
    if shutil.which("clang++-22") is None:
        pytest.skip("clang++-22 is not installed")
    return examples_build.build_examples(tmp_path_factory.mktemp("examples") / "build")


@pytest.fixture(scope="session")
def examples(examples_build_result) -> dict:
    """program name -> executable: MNEME_EXAMPLES_PREBUILT=DIR (GPU hosts have no clang or
    CMake package) or built now."""
    prebuilt = os.environ.get("MNEME_EXAMPLES_PREBUILT")
    if prebuilt:
        return examples_build.prebuilt_executables(prebuilt)
    return examples_build_result.executables
