"""Search spaces: parameters, constraints, and how a point becomes a replay configuration.

A space is a set of parameters (integer ranges and categorical choices), constraints
over them, and ``apply(params, settings, ctx)``: the ``ReplaySettings`` a point means.
Built-in spaces (``launch``, ``pipeline``, ``transforms``, ``specialize``, ``bounds``,
``codegen``) and presets (``quick``, ``all``) are switched on by name; users write their
own as a ``Space`` subclass or as a function decorated with :func:`space`. Spaces named
together combine into one ``BoundSpace`` per instance: ``resolve_spaces("launch,pipeline")``.

    from mneme.tune import IntParam, settings_with, space

    @space(IntParam("max_registers", 32, 255, step=8), name="regcap")
    def register_cap(params, settings, ctx):
        return settings_with(settings, compile={"max_registers": params["max_registers"]})

The modules follow the concepts: ``parameters`` (IntParam, Categorical, Constraint),
``base`` (Space, the @space decorator, settings_with), ``builtin`` (the built-in spaces
and presets), ``bound`` (SpaceContext, BoundSpace: spaces bound to an instance) and
``resolve`` (spaces by name). Everything is importable from here and from ``mneme.tune``.
"""

from .base import FunctionSpace, Space, settings_with, space
from .bound import ENUMERATE_LIMIT, FEASIBILITY_SAMPLES, BoundSpace
from .builtin import (
    BUILTIN_SPACES,
    PASS_SEQUENCES,
    PRESETS,
    REGISTER_CAPS,
    UNROLL,
    VECTORIZE,
    BoundsSpace,
    CodegenSpace,
    LaunchSpace,
    PipelineSpace,
    SpecializeSpace,
    TransformSpace,
)
from .context import SpaceContext
from .parameters import Categorical, Constraint, Dim3, IntParam, Parameter, Point
from .resolve import resolve_space, resolve_spaces

__all__ = [
    "BUILTIN_SPACES",
    "ENUMERATE_LIMIT",
    "FEASIBILITY_SAMPLES",
    "PASS_SEQUENCES",
    "PRESETS",
    "REGISTER_CAPS",
    "UNROLL",
    "VECTORIZE",
    "BoundSpace",
    "BoundsSpace",
    "Categorical",
    "CodegenSpace",
    "Constraint",
    "Dim3",
    "FunctionSpace",
    "IntParam",
    "LaunchSpace",
    "Parameter",
    "PipelineSpace",
    "Point",
    "Space",
    "SpaceContext",
    "SpecializeSpace",
    "TransformSpace",
    "resolve_space",
    "resolve_spaces",
    "settings_with",
    "space",
]
