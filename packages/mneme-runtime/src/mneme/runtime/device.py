"""A GPU, its memory, code and streams, on the CUDA driver (loaded at run time)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, SupportsInt

import numpy as np
from mneme.runtime import _native
from mneme.runtime.address_space import DEFAULT_BASE, DEFAULT_SIZE, AddressSpace

DeviceProperties = _native.DeviceProperties
ParamInfo = _native.ParamInfo
FunctionAttributes = _native.FunctionAttributes

Dim = int | Sequence[int]


def driver_available() -> bool:
    """Whether this process can use the CUDA driver; never raises.

    Returns:
        True when libcuda.so.1 loads and cuInit succeeds.
    """
    return _native.cuda_driver_available()


def device_count() -> int:
    """The CUDA devices this process sees (``CUDA_VISIBLE_DEVICES`` applies).

    Returns:
        Their number.

    Raises:
        NoDriverError: no usable CUDA driver.
    """
    return _native.cuda_device_count()


def can_access_peer(ordinal: int, peer: int) -> bool:
    """Whether one device can read and write the memory of another (peer access).

    Parameters:
        ordinal: the device that reads and writes.
        peer: the device whose memory it reaches.

    Returns:
        The driver's answer (``cuDeviceCanAccessPeer``).
    """
    return _native.cuda_can_access_peer(ordinal, peer)


def _dim3(value: Dim) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"a grid or block shape has 1 to 3 dimensions, got {value!r}")
    return (*dims, *(1,) * (3 - len(dims)))  # type: ignore[return-value]


def _byte_view(data: Any, writable: bool = False) -> np.ndarray:
    """A flat uint8 view of a buffer-protocol object (numpy array, bytes, ...).

    No copy unless a source is strided; a destination must be C-contiguous.
    Raw bytes keep any dtype (structured, float16, bool) away from the binding.
    """
    if isinstance(data, bytes | bytearray):
        array = np.frombuffer(data, dtype=np.uint8)
    elif isinstance(data, np.ndarray):
        array = data
    else:
        array = np.asarray(memoryview(data))  # type: ignore[assignment]
    if not array.flags.c_contiguous:
        if writable:
            raise ValueError("the destination buffer must be C-contiguous")
        array = np.ascontiguousarray(array)
    if writable and not array.flags.writeable:
        raise ValueError("the destination buffer is read-only")
    return array.reshape(-1).view(np.uint8)


class Stream:
    """A non-blocking stream; async copies keep their host buffers alive until
    :meth:`synchronize`. Made by :meth:`Device.stream`.

    Parameters:
        native: the native stream this wraps.
    """

    def __init__(self, native: _native.Stream) -> None:
        self._native = native
        self._pending: list[Any] = []

    def _keep(self, buffer: Any) -> None:
        self._pending.append(buffer)

    def synchronize(self) -> None:
        """Wait for everything queued on the stream, then let go of the host buffers its
        copies kept alive.

        Raises:
            DriverError: the driver reports a failure of the queued work.
        """
        self._native.synchronize()
        self._pending.clear()


class Event:
    """A CUDA event, for timing work on a stream. Made by :meth:`Device.event`.

    Parameters:
        native: the native event this wraps.
    """

    def __init__(self, native: _native.Event) -> None:
        self._native = native

    def record(self, stream: Stream | None = None) -> None:
        """Record the event on a stream: it completes when the work queued before it has.

        Parameters:
            stream: the stream; None for the default stream.
        """
        self._native.record(stream._native if stream else None)

    def synchronize(self) -> None:
        """Wait until the event has completed."""
        self._native.synchronize()

    def elapsed_ms(self, end: Event) -> float:
        """The time between this event and a later one.

        Parameters:
            end: the later event (both recorded and complete).

        Returns:
            Milliseconds between them.
        """
        return self._native.elapsed_ms(end._native)


class Function:
    """A kernel of a loaded module. Made by :meth:`Module.function`.

    Parameters:
        native: the native function this wraps.
    """

    def __init__(self, native: _native.Function) -> None:
        self._native = native
        self._params: list[ParamInfo] | None = None

    @property
    def name(self) -> str:
        return self._native.name

    @property
    def params(self) -> list[ParamInfo]:
        """Offset and size of each parameter in the argument buffer (cuFuncGetParamInfo)."""
        if self._params is None:
            self._params = self._native.parameter_info()
        return self._params

    @property
    def attributes(self) -> FunctionAttributes:
        return self._native.attributes()

    def set_max_dynamic_shared_memory(self, nbytes: int) -> None:
        """Allow launches with up to ``nbytes`` of dynamic shared memory (above the
        default 48 KiB, up to the device's opt-in limit).

        Parameters:
            nbytes: the new limit.
        """
        self._native.set_max_dynamic_shared_memory(nbytes)

    def pack_arguments(self, *values: Any) -> bytes:
        """Lay ``values`` out as the kernel's argument buffer.

        Parameters:
            *values: one per parameter: an int (little-endian, the parameter's size;
                pointers and Allocation objects too), a float (f32 or f64 by size), a
                numpy scalar or array, or bytes of exactly the parameter's size.

        Returns:
            The argument buffer, as :meth:`launch` takes it.

        Raises:
            ValueError: a value count or size that does not match the parameters.
        """
        params = self.params
        if len(values) != len(params):
            raise ValueError(
                f"kernel {self.name} takes {len(params)} parameters, got {len(values)}"
            )
        size = max((p.offset + p.size for p in params), default=0)
        buffer = bytearray(size)
        for index, (param, value) in enumerate(zip(params, values, strict=True)):
            raw = _encode(value, param.size)
            if len(raw) != param.size:
                raise ValueError(
                    f"parameter {index} of {self.name} is {param.size} bytes, "
                    f"the value gives {len(raw)}"
                )
            buffer[param.offset : param.offset + param.size] = raw
        return bytes(buffer)

    def launch(
        self,
        grid: Dim,
        block: Dim,
        args: bytes | bytearray | memoryview | np.ndarray = b"",
        shared_bytes: int = 0,
        stream: Stream | None = None,
        cluster: Dim | None = None,
        cooperative: bool = False,
    ) -> None:
        """Launch the kernel with a raw argument buffer.

        Parameters:
            grid: the grid (1 to 3 dimensions).
            block: the block (1 to 3 dimensions).
            args: the argument buffer, as recorded or from :meth:`pack_arguments`.
            shared_bytes: dynamic shared memory in bytes.
            stream: the stream; None for the default stream.
            cluster: a thread-block cluster shape (CUDA 12, compute capability 9.0+);
                None for none.
            cooperative: launch cooperatively: every block resident at once, so a
                grid-wide ``cooperative_groups`` sync holds (the driver refuses a grid
                larger than :meth:`max_active_blocks_per_multiprocessor` times the
                multiprocessors).

        Raises:
            ValueError: a grid or block of more than three dimensions.
            DriverError: the driver refused the launch.
        """
        self._native.launch(
            _dim3(grid),
            _dim3(block),
            _byte_view(args),
            shared_bytes,
            stream._native if stream else None,
            _dim3(cluster) if cluster else (1, 1, 1),
            bool(cooperative),
        )

    def max_active_blocks_per_multiprocessor(self, block_threads: int, shared_bytes: int = 0) -> int:
        """How many blocks one multiprocessor holds at once with this function's registers
        and shared memory (the driver's occupancy calculator).

        Parameters:
            block_threads: threads per block.
            shared_bytes: dynamic shared memory per block.

        Returns:
            The number of resident blocks.
        """
        return int(self._native.max_active_blocks_per_multiprocessor(int(block_threads), int(shared_bytes)))

    def __call__(
        self,
        grid: Dim,
        block: Dim,
        *values: Any,
        shared_bytes: int = 0,
        stream: Stream | None = None,
    ) -> None:
        self.launch(grid, block, self.pack_arguments(*values), shared_bytes, stream)


def _encode(value: Any, size: int) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, np.ndarray | np.generic):
        return np.ascontiguousarray(value).tobytes()
    if isinstance(value, float):
        if size == 4:
            return struct.pack("<f", value)
        if size == 8:
            return struct.pack("<d", value)
        raise ValueError(f"cannot pass a float as a {size}-byte parameter")
    integer = int(value)  # ints, Allocation (its address), IntEnum …
    return integer.to_bytes(size, "little", signed=integer < 0)


class Module:
    """Loaded device code (PTX or cubin); unloaded when garbage collected. Made by
    :meth:`Device.load_module`.

    Parameters:
        native: the native module this wraps.
        device: the device it is loaded on.
    """

    def __init__(self, native: _native.Module, device: Device) -> None:
        self._native = native
        self.device = device

    def function(self, name: str) -> Function:
        """A kernel of the module.

        Parameters:
            name: its (mangled) name.

        Returns:
            The kernel.

        Raises:
            DriverError: the module has no kernel of that name.
        """
        return Function(self._native.function(name))

    def global_address(self, name: str) -> tuple[int, int]:
        """Where a module-scope ``__device__`` variable lives.

        Parameters:
            name: the variable's (mangled) name.

        Returns:
            Its address and size in bytes.

        Raises:
            DriverError: the module has no such variable.
        """
        return self._native.global_address(name)

    def set_global(self, name: str, data: Any) -> None:
        """Write a module-scope ``__device__`` variable.

        Parameters:
            name: the variable's (mangled) name.
            data: a host buffer of exactly the variable's size.

        Raises:
            ValueError: ``data`` is not the variable's size.
        """
        address, size = self.global_address(name)
        buffer = _byte_view(data)
        nbytes = buffer.nbytes
        if nbytes != size:
            raise ValueError(f"global {name} is {size} bytes, the data gives {nbytes}")
        self.device.copy_to_device(address, buffer)

    def get_global(self, name: str, dtype: Any = np.uint8) -> np.ndarray:
        """Read a module-scope ``__device__`` variable.

        Parameters:
            name: the variable's (mangled) name.
            dtype: the element type of the array returned.

        Returns:
            A new array holding the variable's bytes.
        """
        address, size = self.global_address(name)
        out = np.empty(size // np.dtype(dtype).itemsize, dtype=dtype)
        self.device.copy_from_device(out, address)
        return out


class Device:
    """One GPU. On CUDA it works in the device's primary context, the one the CUDA
    runtime of a recorded application uses too.

    Parameters:
        ordinal: the device's number in this process (``CUDA_VISIBLE_DEVICES``
            applies).
        backend: ``"cuda"``; ``"hip"`` needs a build made with ROCm installed.

    Raises:
        NoDriverError: no usable driver, or the backend was not built.
        NoDeviceError: no device of that ordinal, or one without the VMM API.
    """

    def __init__(self, ordinal: int = 0, backend: str = "cuda") -> None:
        self._native = _native.open_device(backend, ordinal)
        self.properties: DeviceProperties = self._native.properties

    @property
    def ordinal(self) -> int:
        return self.properties.ordinal

    @property
    def name(self) -> str:
        return self.properties.name

    @property
    def compute_capability(self) -> tuple[int, int]:
        p = self.properties
        return (p.compute_capability_major, p.compute_capability_minor)

    def memory_info(self) -> tuple[int, int]:
        """The device's memory.

        Returns:
            Free and total bytes.
        """
        return self._native.memory_info()

    def synchronize(self) -> None:
        """Wait for all work on the device (its primary context)."""
        self._native.synchronize()

    def address_space(
        self, base: int = DEFAULT_BASE, size: int = DEFAULT_SIZE, shared_with: Sequence = ()
    ) -> AddressSpace:
        """Reserve a fixed range of device virtual address space, with an allocator.

        Parameters:
            base: the range's first address.
            size: its size in bytes.
            shared_with: Devices (or ordinals) that reach its memory too (peer access).

        Returns:
            The range; close it to give the memory back.

        Raises:
            RangeUnavailableError: part of the range is in use.
            UserError: a device of ``shared_with`` cannot reach this one.
        """
        space = AddressSpace(self._native.address_space(base, size), device=self)
        try:
            for other in shared_with:
                space.share_with(other)
        except BaseException:
            space.close()
            raise
        return space

    # --- copies ---------------------------------------------------------------

    def copy_to_device(self, dst: SupportsInt, src: Any, stream: Stream | None = None) -> None:
        """Copy a host buffer to device memory.

        Parameters:
            dst: the device address (an int or an Allocation).
            src: a numpy array, bytes or any buffer; all of it is copied.
            stream: copy asynchronously on this stream (the buffer is kept alive until
                it synchronizes); None copies before returning.

        Raises:
            DriverError: the copy failed.
        """
        buffer = _byte_view(src)
        self._native.copy_to_device(int(dst), buffer, stream._native if stream else None)
        if stream:
            stream._keep(buffer)

    def copy_from_device(self, dst: Any, src: SupportsInt, stream: Stream | None = None) -> None:
        """Copy device memory into a host buffer.

        Parameters:
            dst: a writable, C-contiguous host buffer; it is filled whole.
            src: the device address.
            stream: copy asynchronously on this stream; None copies before returning.

        Raises:
            ValueError: ``dst`` is read-only or not contiguous.
            DriverError: the copy failed.
        """
        buffer = _byte_view(dst, writable=True)
        self._native.copy_from_device(buffer, int(src), stream._native if stream else None)
        if stream:
            stream._keep(buffer)

    def read(
        self, src: SupportsInt, shape: int | Sequence[int], dtype: Any = np.uint8
    ) -> np.ndarray:
        """Read device memory into a new array.

        Parameters:
            src: the device address.
            shape: the array's shape.
            dtype: its element type.

        Returns:
            The array.
        """
        out = np.empty(shape, dtype=dtype)
        self.copy_from_device(out, src)
        return out

    def copy_device_to_device(
        self, dst: SupportsInt, src: SupportsInt, nbytes: int, stream: Stream | None = None
    ) -> None:
        """Copy device memory to device memory.

        Parameters:
            dst: the destination address.
            src: the source address.
            nbytes: bytes to copy.
            stream: copy asynchronously on this stream; None copies before returning.
        """
        self._native.copy_device_to_device(
            int(dst), int(src), nbytes, stream._native if stream else None
        )

    def fill(self, dst: SupportsInt, value: int, nbytes: int, stream: Stream | None = None) -> None:
        """Set device memory to one byte value.

        Parameters:
            dst: the device address.
            value: the byte (0-255).
            nbytes: bytes to set.
            stream: set asynchronously on this stream; None before returning.
        """
        self._native.fill(int(dst), value, nbytes, stream._native if stream else None)

    def pinned_array(self, shape: int | Sequence[int], dtype: Any = np.uint8) -> np.ndarray:
        """A numpy array on page-locked host memory (freed with the array), for fast and
        asynchronous copies.

        Parameters:
            shape: the array's shape.
            dtype: its element type.

        Returns:
            The array (uninitialised).
        """
        dtype = np.dtype(dtype)
        count = int(np.prod(shape))
        raw = self._native.pinned_buffer(max(count * dtype.itemsize, 1))
        return raw[: count * dtype.itemsize].view(dtype).reshape(shape)

    # --- code, streams, events -------------------------------------------------

    def load_module(self, image: str | bytes | bytearray | memoryview) -> Module:
        """Load device code.

        Parameters:
            image: PTX text (str or bytes) or a cubin or fatbin image.

        Returns:
            The loaded module.

        Raises:
            DriverError: the driver refused the image (its JIT log is in the message).
        """
        if isinstance(image, str):
            image = image.encode()
        return Module(self._native.load_module(image), self)  # type: ignore[arg-type]

    def stream(self) -> Stream:
        """A new non-blocking stream.

        Returns:
            The stream.
        """
        return Stream(self._native.create_stream())

    def event(self) -> Event:
        """A new event.

        Returns:
            The event.
        """
        return Event(self._native.create_event())

    def __repr__(self) -> str:
        major, minor = self.compute_capability
        return f"Device({self.ordinal}, {self.name!r}, sm_{major}{minor})"
