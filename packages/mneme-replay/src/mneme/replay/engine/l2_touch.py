"""A kernel that moves given memory through L2 in one interleaved stream, as a streaming
kernel would (replay's ``app`` cache mode: predecessor_traffic.py).

Each segment of a table is (device address, 16-byte units, written flag). Thread step
``s`` of ``steps`` (grid-stride, so the GPU goes over the steps roughly in order) touches
units ``[s*n/steps, (s+1)*n/steps)`` of every segment of ``n`` units: every segment
advances at its own rate and all end together, the way a kernel reading two inputs and
writing one output moves them. A written segment's units are loaded and stored back
unchanged (its lines end dirty in L2, its bytes as they were); the others are loaded
only (``.cg``: L2, not L1). The loaded words feed a store to ``sink`` that happens only
when their XOR is one particular value, so the compiler keeps every load.

Written by hand in PTX (any GPU of compute capability 7.0 or later JIT-compiles it) so
replay needs no compiler for it.
"""

from __future__ import annotations

import struct

KERNEL = "mneme_l2_touch"
#: bytes one unit covers (a 16-byte vector load per unit)
UNIT = 16
THREADS = 256
#: blocks per SM at most (the rest is the grid-stride loop)
BLOCKS_PER_SM = 8

PTX = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry mneme_l2_touch(
	.param .u64 table,
	.param .u32 count,
	.param .u64 steps,
	.param .u64 sink
)
{
	.reg .pred 	%p<6>;
	.reg .b32 	%r<12>;
	.reg .b64 	%rd<20>;

	ld.param.u64 	%rd1, [table];
	ld.param.u32 	%r1, [count];
	ld.param.u64 	%rd2, [steps];
	ld.param.u64 	%rd3, [sink];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd3, %rd3;
	mov.u32 	%r2, %ctaid.x;
	mov.u32 	%r3, %ntid.x;
	mov.u32 	%r4, %tid.x;
	mov.u32 	%r5, %nctaid.x;
	mul.wide.u32 	%rd4, %r2, %r3;
	cvt.u64.u32 	%rd5, %r4;
	add.s64 	%rd4, %rd4, %rd5;
	mul.wide.u32 	%rd6, %r5, %r3;
	mov.u32 	%r6, 0;
$STEP:
	setp.ge.u64 	%p1, %rd4, %rd2;
	@%p1 bra 	$DONE;
	mov.u32 	%r7, 0;
$SEGMENT:
	setp.ge.u32 	%p2, %r7, %r1;
	@%p2 bra 	$NEXT;
	mul.wide.u32 	%rd7, %r7, 24;
	add.s64 	%rd8, %rd1, %rd7;
	ld.global.nc.u64 	%rd9, [%rd8];
	ld.global.nc.u64 	%rd10, [%rd8+8];
	ld.global.nc.u64 	%rd11, [%rd8+16];
	cvta.to.global.u64 	%rd9, %rd9;
	mul.lo.s64 	%rd12, %rd4, %rd10;
	div.u64 	%rd13, %rd12, %rd2;
	add.s64 	%rd14, %rd12, %rd10;
	div.u64 	%rd15, %rd14, %rd2;
	setp.ne.s64 	%p3, %rd11, 0;
$UNIT:
	setp.ge.u64 	%p4, %rd13, %rd15;
	@%p4 bra 	$SEGMENT_DONE;
	shl.b64 	%rd16, %rd13, 4;
	add.s64 	%rd17, %rd9, %rd16;
	ld.global.cg.v4.u32 	{%r8, %r9, %r10, %r11}, [%rd17];
	@%p3 st.global.cg.v4.u32 	[%rd17], {%r8, %r9, %r10, %r11};
	xor.b32 	%r6, %r6, %r8;
	xor.b32 	%r6, %r6, %r11;
	add.s64 	%rd13, %rd13, 1;
	bra 	$UNIT;
$SEGMENT_DONE:
	add.s32 	%r7, %r7, 1;
	bra 	$SEGMENT;
$NEXT:
	add.s64 	%rd4, %rd4, %rd6;
	bra 	$STEP;
$DONE:
	setp.ne.u32 	%p5, %r6, -1640531527;
	@%p5 bra 	$END;
	st.global.u32 	[%rd3], %r6;
$END:
	ret;
}
"""


class L2Touch:
    """The kernel loaded on ``device``, with its segment table at ``table`` (device memory
    of at least ``table_bytes(len(segments))``) and a 4-byte ``sink``."""

    def __init__(self, device, segments: list[tuple[int, int, bool]], table: int, sink: int):
        """``segments``: (device address, bytes, written); addresses and sizes in whole
        units (predecessor_traffic.py aligns them)."""
        self.device = device
        self.function = device.load_module(PTX).function(KERNEL)
        self.count = len(segments)
        self.steps = max((size // UNIT for _, size, _ in segments), default=0)
        if segments:  # (none: nothing to touch, no launch)
            device.copy_to_device(table, table_image(segments))
        sms = int(getattr(device.properties, "multiprocessor_count", 0) or 132)
        self.blocks = max(1, min(-(-self.steps // THREADS), sms * BLOCKS_PER_SM))
        self.args = self.function.pack_arguments(table, self.count, self.steps, sink)

    def launch(self, stream=None) -> None:
        if self.steps:
            self.function.launch((self.blocks, 1, 1), (THREADS, 1, 1), self.args, stream=stream)


def table_bytes(count: int) -> int:
    return 24 * max(count, 1)


def table_image(segments: list[tuple[int, int, bool]]) -> bytes:
    """The segment table as the kernel reads it: (address, units, written) as three u64."""
    return b"".join(struct.pack("<QQQ", address, size // UNIT, int(written))
                    for address, size, written in segments)
