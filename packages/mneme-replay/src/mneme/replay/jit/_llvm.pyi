"""LLVM 22 binding: parse, inspect, transform and compile GPU kernel IR"""

from collections.abc import Mapping, Sequence


LLVM_VERSION: str

def check_pipeline(pipeline: str, triple: str = 'nvptx64-nvidia-cuda') -> None:
    """Raise UnknownPassError if the pipeline string does not parse"""

def registered_targets() -> list[str]:
    """LLVM targets compiled into this module"""

class Argument:
    @property
    def index(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def type(self) -> str:
        """IR type (the pointee aggregate for byval)"""

    @property
    def size(self) -> int:
        """bytes in the launch argument buffer"""

    @property
    def align(self) -> int: ...

    @property
    def offset(self) -> int:
        """offset in the launch argument buffer"""

    @property
    def byval(self) -> bool: ...

    def __repr__(self) -> str: ...

class Instruction:
    @property
    def opcode(self) -> str:
        """e.g. 'fadd', 'load', 'call'"""

    @property
    def type(self) -> str:
        """result type as IR text"""

    @property
    def operands(self) -> list[str]:
        """operands as typed IR text"""

    @property
    def called_function(self) -> str | None:
        """callee name of a direct call, else None"""

    @property
    def metadata(self) -> dict[str, str]:
        """kind name -> metadata text"""

    def __str__(self) -> str: ...

    def __repr__(self) -> str: ...

class BasicBlock:
    @property
    def name(self) -> str: ...

    @property
    def instructions(self) -> list[Instruction]: ...

    @property
    def successors(self) -> list[BasicBlock]: ...

    def __len__(self) -> int: ...

    def __repr__(self) -> str: ...

class Function:
    @property
    def name(self) -> str: ...

    @property
    def is_kernel(self) -> bool:
        """ptx_kernel or amdgpu_kernel calling convention"""

    @property
    def is_declaration(self) -> bool: ...

    @property
    def linkage(self) -> str: ...

    @property
    def calling_convention(self) -> int: ...

    @property
    def attributes(self) -> dict[str, str]:
        """function attributes"""

    @property
    def arguments(self) -> list[Argument]: ...

    @property
    def blocks(self) -> list[BasicBlock]: ...

    @property
    def instruction_count(self) -> int: ...

    @property
    def loop_count(self) -> int:
        """natural loops, nested included"""

    @property
    def max_loop_depth(self) -> int: ...

    def __str__(self) -> str: ...

    def __repr__(self) -> str: ...

class Module:
    @staticmethod
    def parse(data: bytes, name: str = '<module>') -> Module:
        """Parse LLVM bitcode or textual IR"""

    def clone(self) -> Module: ...

    def __str__(self) -> str: ...

    def bitcode(self) -> bytes: ...

    def verify(self) -> None:
        """Raise InvalidIRError with LLVM's message"""

    @property
    def triple(self) -> str: ...

    @property
    def data_layout(self) -> str: ...

    @property
    def source_name(self) -> str: ...

    @property
    def functions(self) -> list[Function]: ...

    def function(self, name: str) -> Function: ...

    def run_passes(self, pipeline: str, cpu: str = '') -> None:
        """Run a textual new-pass-manager pipeline (opt -passes=)"""

    def link_libdevice(self, path: str) -> bool:
        """Link libdevice if the module calls __nv_* functions; True if linked"""

    def keep_only_kernel(self, kernel: str) -> None: ...

    def specialize_arguments(self, kernel: str, values: Mapping[int, bytes]) -> None:
        """Replace arguments by constants: {index: recorded bytes}"""

    def specialize_launch_dims(self, kernel: str, block: Sequence[int] | None = None, grid: Sequence[int] | None = None) -> None: ...

    def set_launch_bounds(self, kernel: str, max_threads: int | None = None, min_blocks: int | None = None, max_registers: int | None = None) -> None: ...

    def guard_memory_accesses(self, max_ranges: int = 64) -> int:
        """
        Check every memory access before it is made (the guarded probe variant); the number of accesses guarded
        """

    def emit_assembly(self, cpu: str, features: str = '', opt_level: int = 2) -> str:
        """PTX (NVPTX) or assembly text"""

    def emit_object(self, cpu: str, features: str = '', opt_level: int = 2) -> bytes:
        """Object file (AMDGPU code object ELF)"""
