"""Why a tuned kernel ran in no swapped launch, in one line (``mneme run --apply`` prints
it for every such kernel: a tuned kernel is never left at a silent 0)."""

from __future__ import annotations

from ._apply_plan import KernelReport, TunedKernel

__all__ = ["why_not_swapped"]


def why_not_swapped(kernel: TunedKernel, report: KernelReport) -> str | None:
    """Why no launch of a kernel ran its tuned code, from the swapper's counts
    (launch_swap.cpp).

    Parameters:
        kernel: the tuned kernel.
        report: what the swapper saw of it.

    Returns:
        What kept every launch on the original code; None when some launch ran the
        tuned code.
    """
    if report.swapped:
        return None
    if report.load_error:
        return report.load_error
    if report.launches == 0:
        if report.cupti_launches:
            return (f"the application launched it {report.cupti_launches} times through a path the "
                    "swapper does not intercept (driver entry points taken with cuGetProcAddress, as "
                    "Triton and PyTorch do, or a CUDA graph): those launches ran the original code")
        return ("the application did not launch it in this run (another input or code path than "
                "the recorded one, or a kernel of another name)")
    reasons = []
    if report.attributes:
        reasons.append(f"{report.attributes} set launch attributes other than COOPERATIVE (clusters, "
                       "priority), which the tuned launch does not carry")
    if report.other_dims:
        g, b, _ = kernel.recorded
        reasons.append(f"{report.other_dims} had other dimensions than the recorded grid {g} and block {b}, "
                       "which the tuned code has compiled in (specialized dimensions)")
    if report.other_args:
        reasons.append(f"{report.other_args} passed other values of the specialized argument(s) "
                       f"{', '.join(map(str, sorted(kernel.specialized_args)))}")
    if report.over_bound:
        reasons.append(f"{report.over_bound} used blocks larger than the compiled-in launch bound "
                       f"{kernel.bound}")
    if report.refused:
        reasons.append(f"{report.refused} were refused by the driver (the tuned launch needs more "
                       "resources than the GPU gives it)")
    if not reasons:
        return f"none of its {report.launches} launches ran the tuned code (measured without swapping)"
    return f"of its {report.launches} launches, " + "; ".join(reasons)
