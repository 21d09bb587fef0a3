"""Consistency of a kernel's parameter layout (``params``): replay lays the argument
buffer out from these offsets and sizes, so one edited or damaged number would make it
read the wrong bytes without a word. Checked on every read of a kernel's metadata
(schema.KERNEL_SCHEMA's rule) and, against each instance's ``args_size``, by check.
"""

from __future__ import annotations

from .errors import CorruptDataError


def _name(doc: dict) -> str:
    name = doc.get("demangled_name") or doc.get("name")
    return f" ({name})" if isinstance(name, str) and name else ""


def check_params(doc: dict, where: str) -> None:
    """Raise CorruptDataError, one line naming the kernel and the parameter, when the
    params of a kernel's metadata ``doc`` contradict each other.

    Every kernel: parameters in argument order do not overlap. A kernel with IR also
    has the layout its IR gives (and clang lays out): a power-of-two alignment that the
    offset and the size are multiples of (a C type's size is a multiple of its alignment).
    nvcc builds' alignments are guesses from the size (cuFuncGetParamInfo gives none), so
    they are not held to that."""
    params = doc["params"]
    with_ir = doc.get("code", "llvm-bitcode") == "llvm-bitcode"
    end = 0
    for index, p in enumerate(params):
        size, align, offset = p["size"], p["align"], p["offset"]
        here = f"{where}{_name(doc)}: parameter {index} (offset {offset}, size {size}, align {align})"
        if offset < end:
            raise CorruptDataError(f"{here} overlaps the parameter before it (which ends at byte "
                                   f"{end}): the parameter layout is damaged")
        if with_ir:
            if align < 1 or align & (align - 1):
                raise CorruptDataError(f"{here}: the alignment is not a power of two: the "
                                       "parameter layout is damaged")
            if offset % align or size % align:
                what = "offset" if offset % align else "size"
                raise CorruptDataError(f"{here}: the {what} is not a multiple of the alignment: "
                                       "the parameter layout is damaged")
        end = offset + size


def params_end(params) -> int:
    """Bytes of the argument buffer the parameters (``schema.Param``) span."""
    return max((p.offset + p.size for p in params), default=0)
