"""LLVM IR of the on-device verification kernels, compiled through our own binding.

Two kernels, both grid-stride loops that keep per-thread partial results in registers and
touch the result slot with atomics only at the end (and only when they found something):

``mneme_verify_raw_<W>`` (W = 8, 16, 32 or 64 bits): bit-exact comparison of ``n`` words;
counts mismatching *bytes* and finds the first mismatching *byte* offset (little-endian:
the lowest set byte of ``a ^ b`` is the lowest address).

``mneme_verify_<dtype>``: elementwise comparison of ``n`` elements, converted to double.
``mode`` 0 = bit-exact per element, 1 = ``|a - b| <= atol + rtol * |b|`` per element
(NaN matches NaN), 2 = bit-exact per element for the report plus the sums a norm needs.

Both read the expected element ``i & emask``: ``emask`` is all ones for a region compared
with its recorded bytes, and ``2^k - 1`` for one compared with a buffer of ``2^k`` elements
that repeats (a sparse region's zero ranges against a small zero buffer, one launch per
range however long; the buffer stays in L2).

``mneme_multiset_<W>`` (W = 32, 64 or 128 bits): an order-insensitive digest of ``n``
elements of W bits: two sums (mod 2^64) of the elements' 64-bit hashes under two seeds,
added into result words ``[0]`` and ``[1]`` (initialised to 0). Two regions hold the same
multiset of elements when their digests agree (a chance collision: about 2^-128);
``multiset_digest_host`` computes the same on the host.

``mneme_xor_<W>`` (W = 8 or 64 bits): ``dst[i] ^= src[i]`` for ``n`` words: restore
resolves an epilogue stored as its XOR with the prologue on the device.

Result slot (8 x 8 bytes, initialised by the host):
``[0]`` u64 mismatch count, ``[1]`` u64 first mismatch (byte offset for raw, element
index for typed; init ~0), ``[2]`` max |a - b| among mismatches (double bits, init 0),
``[3]`` sum (a - b)^2 (double), ``[4]`` sum b^2 (double), ``[5]`` max |b| (double bits),
``[6]``/``[7]`` unused.
"""

from __future__ import annotations

RESULT_WORDS = 8
RESULT_BYTES = RESULT_WORDS * 8
BLOCK_THREADS = 256

_HEADER = """\
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()
declare double @llvm.fabs.f64(double)
declare double @llvm.maxnum.f64(double, double)
declare i64 @llvm.umin.i64(i64, i64)
declare i64 @llvm.ctpop.i64(i64)
declare i64 @llvm.cttz.i64(i64, i1)
"""

_INDEX = """\
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %nctaid = call i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()
  %tid64 = zext i32 %tid to i64
  %ntid64 = zext i32 %ntid to i64
  %ctaid64 = zext i32 %ctaid to i64
  %nctaid64 = zext i32 %nctaid to i64
  %blockstart = mul i64 %ctaid64, %ntid64
  %start = add i64 %blockstart, %tid64
  %stride = mul i64 %nctaid64, %ntid64
"""

_RAW = """\
define ptx_kernel void @mneme_verify_raw_{bits}(ptr %actual, ptr %expected, i64 %n, i64 %emask, ptr %result) {{
entry:
{index}  br label %loop

loop:
  %i = phi i64 [ %start, %entry ], [ %next, %body ]
  %count = phi i64 [ 0, %entry ], [ %count.next, %body ]
  %first = phi i64 [ -1, %entry ], [ %first.next, %body ]
  %done = icmp uge i64 %i, %n
  br i1 %done, label %exit, label %body

body:
  %pa = getelementptr i{bits}, ptr %actual, i64 %i
  %ie = and i64 %i, %emask
  %pe = getelementptr i{bits}, ptr %expected, i64 %ie
  %a = load i{bits}, ptr %pa, align {align}
  %b = load i{bits}, ptr %pe, align {align}
  %x.w = xor i{bits} %a, %b
{widen}  ; one bit per byte that differs: fold each byte onto its lowest bit
  %s4 = lshr i64 %x, 4
  %o4 = or i64 %x, %s4
  %s2 = lshr i64 %o4, 2
  %o2 = or i64 %o4, %s2
  %s1 = lshr i64 %o2, 1
  %o1 = or i64 %o2, %s1
  %mask = and i64 %o1, 72340172838076673
  %bytes = call i64 @llvm.ctpop.i64(i64 %mask)
  %count.next = add i64 %count, %bytes
  %bad = icmp ne i64 %x, 0
  %tz = call i64 @llvm.cttz.i64(i64 %x, i1 false)
  %byte = lshr i64 %tz, 3
  %base = mul i64 %i, {width}
  %offset = add i64 %base, %byte
  %cand = select i1 %bad, i64 %offset, i64 -1
  %first.next = call i64 @llvm.umin.i64(i64 %first, i64 %cand)
  %next = add i64 %i, %stride
  br label %loop

exit:
  %any = icmp ne i64 %count, 0
  br i1 %any, label %report, label %ret

report:
  %r0 = atomicrmw add ptr %result, i64 %count monotonic, align 8
  %p1 = getelementptr i64, ptr %result, i64 1
  %r1 = atomicrmw umin ptr %p1, i64 %first monotonic, align 8
  br label %ret

ret:
  ret void
}}
"""

_TYPED = """\
define ptx_kernel void @mneme_verify_{name}(ptr %actual, ptr %expected, i64 %n, i64 %emask, i32 %mode, double %atol, double %rtol, ptr %result) {{
entry:
{index}  %is.tol = icmp eq i32 %mode, 1
  %is.norm = icmp eq i32 %mode, 2
  br label %loop

loop:
  %i = phi i64 [ %start, %entry ], [ %next, %body ]
  %count = phi i64 [ 0, %entry ], [ %count.next, %body ]
  %first = phi i64 [ -1, %entry ], [ %first.next, %body ]
  %maxerr = phi double [ 0.0, %entry ], [ %maxerr.next, %body ]
  %sdiff = phi double [ 0.0, %entry ], [ %sdiff.next, %body ]
  %sref = phi double [ 0.0, %entry ], [ %sref.next, %body ]
  %maxref = phi double [ 0.0, %entry ], [ %maxref.next, %body ]
  %done = icmp uge i64 %i, %n
  br i1 %done, label %exit, label %body

body:
  %pa = getelementptr {bits_type}, ptr %actual, i64 %i
  %ie = and i64 %i, %emask
  %pe = getelementptr {bits_type}, ptr %expected, i64 %ie
  %a = load {bits_type}, ptr %pa, align {align}
  %b = load {bits_type}, ptr %pe, align {align}
  %ne = icmp ne {bits_type} %a, %b
{convert_a}{convert_b}  %d = fsub double %fa, %fb
  %ad = call double @llvm.fabs.f64(double %d)
  %d.nan = fcmp uno double %ad, 0.0
  %err.any = select i1 %d.nan, double 0x7FF0000000000000, double %ad
  %err = select i1 %ne, double %err.any, double 0.0
  %a.nan = fcmp uno double %fa, 0.0
  %b.nan = fcmp uno double %fb, 0.0
  %both.nan = and i1 %a.nan, %b.nan
  %afb.raw = call double @llvm.fabs.f64(double %fb)
  %afb = select i1 %b.nan, double 0.0, double %afb.raw
  %scaled = fmul double %rtol, %afb
  %bound = fadd double %atol, %scaled
  %within = fcmp ole double %err, %bound
  %tol.ok = or i1 %within, %both.nan
  %tol.bad = xor i1 %tol.ok, true
  %bad = select i1 %is.tol, i1 %tol.bad, i1 %ne
  %bad64 = zext i1 %bad to i64
  %count.next = add i64 %count, %bad64
  %cand = select i1 %bad, i64 %i, i64 -1
  %first.next = call i64 @llvm.umin.i64(i64 %first, i64 %cand)
  %err.bad = select i1 %bad, double %err, double 0.0
  %maxerr.next = call double @llvm.maxnum.f64(double %maxerr, double %err.bad)
  %sq = fmul double %err, %err
  %sdiff.next = fadd double %sdiff, %sq
  %rsq = fmul double %afb, %afb
  %sref.next = fadd double %sref, %rsq
  %maxref.next = call double @llvm.maxnum.f64(double %maxref, double %afb)
  %next = add i64 %i, %stride
  br label %loop

exit:
  %any = icmp ne i64 %count, 0
  br i1 %any, label %report, label %sums

report:
  %r0 = atomicrmw add ptr %result, i64 %count monotonic, align 8
  %p1 = getelementptr i64, ptr %result, i64 1
  %r1 = atomicrmw umin ptr %p1, i64 %first monotonic, align 8
  %p2 = getelementptr i64, ptr %result, i64 2
  %maxerr.bits = bitcast double %maxerr to i64
  %r2 = atomicrmw umax ptr %p2, i64 %maxerr.bits monotonic, align 8
  br label %sums

sums:
  br i1 %is.norm, label %norm, label %ret

norm:
  %p3 = getelementptr i64, ptr %result, i64 3
  %r3 = atomicrmw fadd ptr %p3, double %sdiff monotonic, align 8
  %p4 = getelementptr i64, ptr %result, i64 4
  %r4 = atomicrmw fadd ptr %p4, double %sref monotonic, align 8
  %p5 = getelementptr i64, ptr %result, i64 5
  %maxref.bits = bitcast double %maxref to i64
  %r5 = atomicrmw umax ptr %p5, i64 %maxref.bits monotonic, align 8
  br label %ret

ret:
  ret void
}}
"""

# numpy dtype name -> (IR integer type of the bits, bytes, how to turn %{v}.bits into double)
_FLOAT_TYPES = {"float16": "half", "float32": "float", "float64": "double"}
_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_UINT_BITS = {"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}

#: element dtypes the typed kernel handles (complex types verify as their real parts pairs)
TYPED_DTYPES = (*_FLOAT_TYPES, *_INT_BITS, *_UINT_BITS)
RAW_WIDTHS = (8, 4, 2, 1)


def _convert(dtype: str, value: str, out: str) -> str:
    if dtype in _FLOAT_TYPES:
        ir_type = _FLOAT_TYPES[dtype]
        if ir_type == "double":
            return f"  %{out} = bitcast i64 %{value} to double\n"
        bits = {"half": 16, "float": 32}[ir_type]
        return (
            f"  %{out}.t = bitcast i{bits} %{value} to {ir_type}\n"
            f"  %{out} = fpext {ir_type} %{out}.t to double\n"
        )
    if dtype in _INT_BITS:
        return f"  %{out} = sitofp i{_INT_BITS[dtype]} %{value} to double\n"
    return f"  %{out} = uitofp i{_UINT_BITS[dtype]} %{value} to double\n"


def _bits(dtype: str) -> int:
    if dtype in _FLOAT_TYPES:
        return {"float16": 16, "float32": 32, "float64": 64}[dtype]
    return _INT_BITS.get(dtype) or _UINT_BITS[dtype]


def raw_kernel_name(width: int) -> str:
    return f"mneme_verify_raw_{width * 8}"


def typed_kernel_name(dtype: str) -> str:
    return f"mneme_verify_{dtype}"


MULTISET_WIDTHS = (4, 8, 16)
#: the two seeds of the multiset digest, and splitmix64's finaliser constants
MULTISET_SEEDS = (0x9E3779B97F4A7C15, 0xD1B54A32D192ED03)
_MIX_1, _MIX_2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _i64(value: int) -> int:
    """An unsigned 64-bit constant as LLVM IR writes it (signed decimal)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _mix(out: str, value: str) -> str:
    """splitmix64's finaliser of ``%value`` into ``%out`` (a bijection on 64 bits)."""
    return (
        f"  %{out}.a = lshr i64 %{value}, 30\n  %{out}.b = xor i64 %{value}, %{out}.a\n"
        f"  %{out}.c = mul i64 %{out}.b, {_i64(_MIX_1)}\n  %{out}.d = lshr i64 %{out}.c, 27\n"
        f"  %{out}.e = xor i64 %{out}.c, %{out}.d\n  %{out}.f = mul i64 %{out}.e, {_i64(_MIX_2)}\n"
        f"  %{out}.g = lshr i64 %{out}.f, 31\n  %{out} = xor i64 %{out}.f, %{out}.g\n"
    )


def _multiset_hash(seed: int, tag: str, width: int) -> str:
    """The hash of element words ``%lo`` (and ``%hi`` for 16 bytes) under ``seed``."""
    text = f"  %{tag}.in = add i64 %lo, {_i64(seed)}\n" + _mix(f"{tag}.lo", f"{tag}.in")
    if width == 16:
        text += f"  %{tag}.hi.in = xor i64 %{tag}.lo, %hi\n" + _mix(tag, f"{tag}.hi.in")
    else:
        text += f"  %{tag} = or i64 %{tag}.lo, 0\n"
    return text


_MULTISET = """\
define ptx_kernel void @mneme_multiset_{bits}(ptr %data, i64 %n, ptr %result) {{
entry:
{index}  br label %loop

loop:
  %i = phi i64 [ %start, %entry ], [ %next, %body ]
  %s1 = phi i64 [ 0, %entry ], [ %s1.next, %body ]
  %s2 = phi i64 [ 0, %entry ], [ %s2.next, %body ]
  %done = icmp uge i64 %i, %n
  br i1 %done, label %exit, label %body

body:
  %p = getelementptr i{bits}, ptr %data, i64 %i
  %v = load i{bits}, ptr %p, align {align}
{words}{hash1}{hash2}  %s1.next = add i64 %s1, %h1
  %s2.next = add i64 %s2, %h2
  %next = add i64 %i, %stride
  br label %loop

exit:
  %r0 = atomicrmw add ptr %result, i64 %s1 monotonic, align 8
  %p1 = getelementptr i64, ptr %result, i64 1
  %r1 = atomicrmw add ptr %p1, i64 %s2 monotonic, align 8
  ret void
}}
"""


_XOR = """\
define ptx_kernel void @mneme_xor_{bits}(ptr %dst, ptr %src, i64 %n) {{
entry:
{index}  br label %loop

loop:
  %i = phi i64 [ %start, %entry ], [ %next, %body ]
  %done = icmp uge i64 %i, %n
  br i1 %done, label %exit, label %body

body:
  %pd = getelementptr i{bits}, ptr %dst, i64 %i
  %ps = getelementptr i{bits}, ptr %src, i64 %i
  %d = load i{bits}, ptr %pd, align {align}
  %s = load i{bits}, ptr %ps, align {align}
  %x = xor i{bits} %d, %s
  store i{bits} %x, ptr %pd, align {align}
  %next = add i64 %i, %stride
  br label %loop

exit:
  ret void
}}
"""
XOR_WIDTHS = (8, 1)


def xor_kernel_name(width: int) -> str:
    return f"mneme_xor_{width * 8}"


def multiset_kernel_name(width: int) -> str:
    return f"mneme_multiset_{width * 8}"


def _multiset_kernel(width: int) -> str:
    if width == 16:
        words = "  %lo = trunc i128 %v to i64\n  %v.hi = lshr i128 %v, 64\n  %hi = trunc i128 %v.hi to i64\n"
    elif width == 8:
        words = "  %lo = or i64 %v, 0\n"
    else:
        words = "  %lo = zext i32 %v to i64\n"
    return _MULTISET.format(bits=width * 8, align=width, index=_INDEX, words=words,
                            hash1=_multiset_hash(MULTISET_SEEDS[0], "h1", width),
                            hash2=_multiset_hash(MULTISET_SEEDS[1], "h2", width))


def multiset_digest_host(data, width: int) -> tuple[int, int]:
    """What ``mneme_multiset_<width * 8>`` adds up, in numpy (the reference semantics)."""
    import numpy as np

    raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    if raw.size % width:
        raise ValueError(f"{raw.size} bytes are not a whole number of {width}-byte elements")

    def mix(x):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(_MIX_1)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(_MIX_2)
        return x ^ (x >> np.uint64(31))

    if width == 16:
        pairs = raw.view(np.uint64).reshape(-1, 2)
        lo, hi = pairs[:, 0], pairs[:, 1]
    else:
        lo, hi = raw.view(np.uint32 if width == 4 else np.uint64).astype(np.uint64), None
    sums = []
    with np.errstate(over="ignore"):
        for seed in MULTISET_SEEDS:
            h = mix(lo + np.uint64(seed))
            if hi is not None:
                h = mix(h ^ hi)
            sums.append(int(np.sum(h, dtype=np.uint64)))
    return sums[0], sums[1]


def verification_ir() -> str:
    """One module with every verification kernel."""
    parts = [_HEADER]
    for width in RAW_WIDTHS:
        widen = (
            "  %x = or i64 %x.w, 0\n" if width == 8 else f"  %x = zext i{width * 8} %x.w to i64\n"
        )
        parts.append(
            _RAW.format(bits=width * 8, align=width, width=width, index=_INDEX, widen=widen)
        )
    for dtype in TYPED_DTYPES:
        bits = _bits(dtype)
        parts.append(
            _TYPED.format(
                name=dtype,
                bits_type=f"i{bits}",
                align=bits // 8,
                index=_INDEX,
                convert_a=_convert(dtype, "a", "fa"),
                convert_b=_convert(dtype, "b", "fb"),
            )
        )
    parts.extend(_multiset_kernel(width) for width in MULTISET_WIDTHS)
    parts.extend(_XOR.format(bits=w * 8, align=w, index=_INDEX) for w in XOR_WIDTHS)
    return "\n".join(parts)
