"""Small static analyses over the binding's IR handles."""

from __future__ import annotations

from collections import Counter

from ._llvm import Function


def instruction_mix(function: Function) -> Counter[str]:
    """The opcodes of a function and how often each occurs.

    Parameters:
        function: a Function of the binding.

    Returns:
        Opcode -> count (calls by callee, as ``call:<name>``).
    """
    mix: Counter[str] = Counter()
    for block in function.blocks:
        for inst in block.instructions:
            callee = inst.called_function if inst.opcode == "call" else None
            mix[f"call:{callee}" if callee else inst.opcode] += 1
    return mix
