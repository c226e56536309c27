"""Peak FLOP/s of a device: Lightning Fabric's figures (``get_available_flops``) and fabricx's dense table.

``get_available_flops`` answers as ``lightning.fabric.utilities.throughput.get_available_flops`` does, figure for
figure (the vendors' data sheets, several with structured sparsity); ``peak_flops`` reads fabricx's table of dense
figures, and ``measure_cpu_peak_flops`` measures what this CPU reaches.
"""

from __future__ import annotations

import time

import torch

from fabricx.utilities.rank_zero import rank_zero_warn

# Lightning Fabric's figures per chip, by dtype name ("tf32": fp32 matmuls on tensor cores).
_LIGHTNING_CUDA_FLOPS: dict[str, dict[str, float]] = {
    "h200 sxm1": {"fp64": 3.4e13, "fp32": 6.7e13, "tf32": 9.9e14, "bf16": 2.0e15, "fp16": 2.0e15, "int8": 4.0e15},
    "h200 nvl1": {"fp64": 3.0e13, "fp32": 6.0e13, "tf32": 8.4e14, "bf16": 1.7e15, "fp16": 1.7e15, "int8": 3.3e15},
    "h100 nvl": {"fp64": 67e12, "fp32": 133.8e12, "tf32": 989.4e12, "bf16": 1978.8e12, "fp16": 1978.8e12,
                 "int8": 3957.8e12},
    "h100 sxm": {"fp64": 33.5e12, "fp32": 66.9e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12,
                 "int8": 1978.9e12},
    "h100 pcie": {"fp64": 25.6e12, "fp32": 51.2e12, "tf32": 378e12, "bf16": 756e12, "fp16": 756e12, "int8": 1513e12},
    "rtx 4090": {"fp32": 82.6e12, "tf32": 82.6e12, "bf16": 82.6e12, "fp16": 82.6e12, "int8": 660.6e12,
                 "int4": 1321.2e12},
    "rtx 4080": {"fp32": 48.7e12, "tf32": 48.7e12, "bf16": 48.7e12, "fp16": 48.7e12, "int8": 389.9e12,
                 "int4": 779.8e12},
    "rtx 4080 super": {"fp32": 52.2e12, "tf32": 52.2e12, "bf16": 52.2e12, "fp16": 52.2e12, "int8": 417.6e12,
                       "int4": 835.2e12},
    "l4": {"fp32": 30.3e12, "tf32": 60e12, "bf16": 121e12, "fp16": 121e12, "int8": 242e12, "int4": 484e12},
    "l40": {"fp32": 90.5e12, "tf32": 90.5e12, "bf16": 181e12, "fp16": 181e12, "int8": 362e12, "int4": 724e12},
    "a100": {"fp64": 9.7e12, "fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12, "int8": 624e12},
    "a6000": {"fp32": 38.7e12, "tf32": 77.4e12, "bf16": 38.7e12, "fp16": 38.7e12, "int8": 309.7e12,
              "int4": 619.3e12},
    "a40": {"fp32": 37.4e12, "tf32": 74.8e12, "bf16": 37.4e12, "fp16": 37.4e12, "int8": 299.3e12, "int4": 598.7e12},
    "a10g": {"fp32": 31.2e12, "tf32": 62.5e12, "bf16": 125e12, "fp16": 125e12, "int8": 250e12, "int4": 500e12},
    "rtx 3090 ti": {"fp32": 40e12, "tf32": 40e12, "bf16": 40e12, "fp16": 40e12, "int8": 320e12, "int4": 640e12},
    "rtx 3090": {"fp32": 35.6e12, "tf32": 35.6e12, "bf16": 35.6e12, "fp16": 35.6e12, "int8": 284e12, "int4": 568e12},
    "rtx 3080 ti": {"fp32": 34.1e12, "tf32": 34.1e12, "bf16": 34.1e12, "fp16": 34.1e12, "int8": 272.8e12,
                    "int4": 546.6e12},
    "rtx 3080": {"fp32": 29.8e12, "tf32": 29.8e12, "bf16": 29.8e12, "fp16": 29.8e12, "int8": 238e12, "int4": 476e12},
    "rtx 3070": {"fp32": 20.3e12, "tf32": 20.3e12, "bf16": 20.3e12, "fp16": 20.3e12, "int8": 162.6e12,
                 "int4": 325.2e12},
    "t4": {"fp32": 8.1e12, "fp16": 65e12, "int8": 130e12, "int4": 260e12},
    "quadro rtx 5000": {"fp32": 11.2e12, "fp16": 89.2e12},
    "rtx 2080 super": {"fp32": 11.2e12, "fp16": 22.3e12, "int8": 178.4e12, "int4": 356.8e12},
    "rtx 2080 ti": {"fp32": 14.2e12, "fp16": 28.5e12, "int8": 227.7e12, "int4": 455.4e12},
    "rtx 2080": {"fp32": 10.6e12, "fp16": 21.2e12, "int8": 169.6e12, "int4": 339.1e12},
    "rtx 2070 super": {"fp32": 9.1e12, "fp16": 18.1e12, "int8": 145e12, "int4": 290e12},
    "titan rtx": {"fp32": 16.3e12, "fp16": 32.6e12, "int8": 261e12, "int4": 522e12},
    "v100 sxm": {"fp64": 7.8e12, "fp32": 15.7e12, "fp16": 125e12},
    "v100 pcie": {"fp64": 7e12, "fp32": 14e12, "fp16": 112e12},
    "v100s pcie": {"fp64": 8.2e12, "fp32": 16.4e12, "fp16": 130e12},
}  # fmt: skip
# TPUs run matrix products in bf16 whatever the dtype asked for.
_TPU_FLOPS = {"v2": 45e12, "v3": 123e12, "v4": 275e12, "v5litepod": 197e12}
_DTYPE_KEYS = {
    torch.float64: "fp64", torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.int8: "int8",
    "tfloat32": "tf32", "int4": "int4",
}  # fmt: skip
# Substrings of a CUDA device name, checked in this order, and the chip each one means.
_CHIP_BY_NAME = (
    ("a6000", "a6000"), ("a100", "a100"), ("a40", "a40"), ("a10g", "a10g"), ("t4", "t4"),
    ("quadro rtx 5000", "quadro rtx 5000"), ("titan rtx", "titan rtx"), ("v100-sxm", "v100 sxm"),
    ("v100-pcie", "v100 pcie"), ("v100s-pcie", "v100s pcie"),
)  # fmt: skip


def _chip(lowered: str) -> str | None:
    """The table key for a lower-cased CUDA device name (``None``: a name not recognised at all)."""
    if "h200" in lowered:
        for form in ("sxm1", "nvl1"):
            if form in lowered:
                return f"h200 {form}"
        return lowered  # recognised, but no figures for this form factor
    if "h100" in lowered:
        if "hbm3" in lowered:
            return "h100 sxm"
        if "nvl" in lowered:
            return "h100 nvl"
        if "pcie" in lowered or "hbm2e" in lowered:
            return "h100 pcie"
        return lowered
    if "l4" in lowered:
        return "l40" if "tesla" in lowered else "l4"
    if "geforce rtx" in lowered:
        words = lowered.split(" ")
        number = words[3] if len(words) > 3 else ""
        variant = " super" if "super" in lowered else " ti" if "ti" in lowered else ""
        return f"rtx {number}{variant}"
    for part, chip in _CHIP_BY_NAME:
        if part in lowered:
            return chip
    return None


def get_available_flops(device: torch.device, dtype: torch.dtype | str) -> int | None:
    """Peak FLOP/s of one ``device`` in ``dtype`` as Lightning Fabric reports it, or ``None`` (with a warning
    for a GPU whose figures are unknown). fp32 counts as TF32 on Ampere and later unless
    ``torch.get_float32_matmul_precision()`` is ``"highest"``.

    Example:
        ```python
        # 312000000000000 on an A100
        get_available_flops(torch.device("cuda", 0), torch.bfloat16)
        get_available_flops(torch.device("cpu"), torch.float32)  # None
        ```
    """
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        chip = _chip(name.lower())
        if chip is None:
            rank_zero_warn(f"FLOPs not found for {name!r}")
            return None
        figures = _LIGHTNING_CUDA_FLOPS.get(chip)
        if figures is None:
            rank_zero_warn(f"FLOPs not found for {name!r}, chip is {chip!r}")
            return None
        ampere_or_later = torch.cuda.get_device_capability(device)[0] >= 8
        if dtype is torch.float32 and ampere_or_later and torch.get_float32_matmul_precision() != "highest":
            dtype = "tfloat32"
        figure = figures.get(_DTYPE_KEYS.get(dtype, ""))
        if figure is None:
            rank_zero_warn(f"{name!r} does not support {dtype}")
            return None
        return int(figure)
    if device.type == "xla":
        return _tpu_flops(dtype)
    return None


def _tpu_flops(dtype: torch.dtype | str) -> int | None:
    from fabricx._compat.xla import tpu_type

    name = tpu_type()
    figure = _TPU_FLOPS.get(name.lower())
    if figure is None:
        rank_zero_warn(f"FLOPs not found for TPU {name!r} with {dtype}")
        return None
    return int(figure)


# fabricx's own dense figures (no sparsity) per device, for peak_flops(). "tf32" is fp32 matmuls with
# torch.backends.cuda.matmul.allow_tf32 (or set_float32_matmul_precision("high")).
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "h200": {"bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12, "fp8": 1978.9e12},
    "h100 sxm": {"bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12, "fp8": 1978.9e12},
    "h100 nvl": {"bf16": 835.5e12, "fp16": 835.5e12, "tf32": 417.5e12, "fp32": 60.0e12, "fp8": 1670.5e12},
    "h100 pcie": {"bf16": 756.5e12, "fp16": 756.5e12, "tf32": 378.0e12, "fp32": 51.2e12, "fp8": 1513.0e12},
    "a100": {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12},
    "a10g": {"bf16": 125e12, "fp16": 125e12, "tf32": 62.5e12, "fp32": 31.2e12},
    "l4": {"bf16": 121e12, "fp16": 121e12, "tf32": 60e12, "fp32": 30.3e12},
    "v100": {"fp16": 125e12, "fp32": 15.7e12},
}
_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}


def peak_flops(device: torch.device | str, dtype: torch.dtype | str = torch.bfloat16) -> float | None:
    """Dense peak FLOP/s of one ``device`` for ``dtype`` from `PEAK_FLOPS`, or ``None`` where unknown.

    For the CPU there is no data sheet figure: use `measure_cpu_peak_flops` and pass its result.

    Example:
        ```python
        # 989.4e12 on an H100 SXM or H200
        peak_flops(torch.device("cuda", 0), torch.bfloat16)
        ```
    """
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = dtype if isinstance(dtype, str) else _DTYPE_NAMES.get(dtype, str(dtype))
    if name == "fp32" and torch.backends.cuda.matmul.allow_tf32:
        name = "tf32"
    return peak_flops_for(torch.cuda.get_device_name(device), name)


def peak_flops_for(device_name: str, dtype_name: str) -> float | None:
    """The `PEAK_FLOPS` entry for a device name as CUDA reports it (``"NVIDIA H100 80GB HBM3"``).

    Example:
        ```python
        peak_flops_for("NVIDIA A100-SXM4-80GB", "bf16")  # 312e12
        ```
    """
    lowered = device_name.lower()
    for key in sorted(PEAK_FLOPS, key=len, reverse=True):
        if all(part in lowered for part in key.split()):
            return PEAK_FLOPS[key].get(dtype_name)
    if "h100" in lowered:  # the SXM part reports no form factor in its name ("NVIDIA H100 80GB HBM3")
        return PEAK_FLOPS["h100 sxm"].get(dtype_name)
    return None


def measure_cpu_peak_flops(dtype: torch.dtype = torch.float32, size: int = 1024, seconds: float = 0.5) -> float:
    """The FLOP/s this process reaches on square matrix products on the CPU (an achievable peak).

    Example:
        ```python
        throughput = Throughput(available_flops=measure_cpu_peak_flops())
        ```
    """
    a = torch.randn(size, size, dtype=dtype)
    b = torch.randn(size, size, dtype=dtype)
    torch.mm(a, b)  # warm-up: first call allocates and picks kernels
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or calls < 2:
        torch.mm(a, b)
        calls += 1
    return 2.0 * size**3 * calls / elapsed
