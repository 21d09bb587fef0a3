"""Spaces by name: built-in ones, presets, and user spaces as ``module:attr`` or
``file.py:attr``."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import SpaceError
from .base import Space
from .builtin import BUILTIN_SPACES, PRESETS, LaunchSpace, PipelineSpace


def resolve_space(spec: str | Space, grid_mode: str = "cover") -> Space:
    """A space by name.

    Parameters:
        spec: a built-in space's name, a user space as ``module:attr`` or
            ``file.py:attr`` (a Space instance, a Space subclass, or a function made a
            space by @space), or a Space (returned as it is).
        grid_mode: the launch space's grid mode.

    Returns:
        The space.

    Raises:
        SpaceError: an unknown name, a user object that is not a space, or one that
            does not load.
    """
    if isinstance(spec, Space):
        return spec
    name = spec.strip()
    if name == "quick-pipeline":  # the quick preset's pipeline: O2 or O3, no extra sequence
        return PipelineSpace(levels=("O2", "O3"), sequences=("",))
    if name in BUILTIN_SPACES:
        return LaunchSpace(grid_mode) if name == "launch" else BUILTIN_SPACES[name]()
    if ":" not in name:
        raise SpaceError(
            f"unknown space {name!r}; built-in spaces: {', '.join(BUILTIN_SPACES)}; presets: "
            f"{', '.join(PRESETS)} (or a user space as module:name or file.py:name)"
        )
    from ..user_code import load_attribute

    target = load_attribute(name)
    if isinstance(target, Space):
        return target
    if isinstance(target, type) and issubclass(target, Space):
        return target()
    raise SpaceError(
        f"{name} is a {type(target).__name__}, not a Space: subclass mneme.tune.Space or "
        "decorate a function with @mneme.tune.space"
    )


def resolve_spaces(specs: str | Sequence[str | Space], grid_mode: str = "cover") -> list[Space]:
    """The spaces of a study.

    Parameters:
        specs: ``"launch,pipeline"`` or a list of names and spaces; presets expand to
            their spaces.
        grid_mode: the launch space's grid mode.

    Returns:
        The spaces, each name once.

    Raises:
        SpaceError: an unknown name, or a space named twice.
    """
    if isinstance(specs, str):
        specs = [s for s in specs.split(",") if s.strip()]
    expanded: list[str | Space] = []
    for spec in specs:
        if isinstance(spec, str) and spec.strip() in PRESETS:
            expanded += PRESETS[spec.strip()].split(",")
        else:
            expanded.append(spec)
    spaces = [resolve_space(s, grid_mode) for s in expanded]
    names = [s.name for s in spaces]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise SpaceError(f"space {', '.join(repeated)} is named more than once")
    return spaces
