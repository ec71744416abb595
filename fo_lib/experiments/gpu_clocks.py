"""The GPU's clocks, power, temperature and throttle reasons as ``nvidia-smi`` reads them: on this
power-capped GPU a timing means little without the clock it ran at (the profile scripts read it
beside their timings)."""
from __future__ import annotations

import subprocess

QUERY = "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active"


def parse_smi(line: str) -> dict:
    """One line of ``nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits`` as a dict."""
    keys = ("sm_mhz", "mem_mhz", "power_w", "temp_c", "throttle")
    vals = [v.strip() for v in line.split(",")]
    if len(vals) != len(keys):
        raise ValueError(f"expected {len(keys)} fields from nvidia-smi, got {line!r}")
    return dict(zip(keys, vals))


def gpu_state() -> dict:
    """torch's device 0 as ``nvidia-smi`` sees it now (:func:`parse_smi`'s dict plus ``gpu``), or
    ``{"error": ...}`` where there is no reading."""
    import torch
    uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)  # torch's device 0, not nvidia-smi's
    error = "no reading"
    for gpu in ([f"GPU-{uuid}"] if uuid else []) + ["0"]:
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-i", gpu],
                                 capture_output=True, text=True, timeout=10).stdout
            return dict(parse_smi(out.strip().splitlines()[0]), gpu=gpu)
        except (OSError, IndexError, ValueError, subprocess.TimeoutExpired) as exc:
            error = str(exc)
    return {"error": error}
