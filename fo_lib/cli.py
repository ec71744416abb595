"""Command line: ``python -m fo_lib {info,tune} ...``."""
from __future__ import annotations

import argparse
import json
import platform
import sys

from .profiles import BandwidthCurve, GemmProfile, ProfileError
from .predictor import MODELS, OverlapModel, TuneResult, synthetic_model


def _version(module: str) -> str:
    try:
        mod = __import__(module)
        return getattr(mod, "__version__", "installed")
    except Exception as exc:  # noqa: BLE001 - report any import failure as text
        return f"not available ({type(exc).__name__})"


def environment_info() -> dict:
    """Versions and devices, for ``info`` and for provenance sidecars."""
    from . import __version__
    info = {"fo_lib": __version__, "python": platform.python_version(), "platform": platform.platform(),
            "numpy": _version("numpy"), "torch": _version("torch"), "cupy": _version("cupy")}
    try:
        import torch
        info["torch_cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            info["gpus"] = [
                {"name": p.name, "sm_count": p.multi_processor_count,
                 "capability": f"{p.major}.{p.minor}", "memory_gib": round(p.total_memory / 2**30, 1)}
                for p in (torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count()))]
    except Exception:  # noqa: BLE001
        pass
    try:
        import cupy
        info["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
        info["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
    except Exception:  # noqa: BLE001
        pass
    try:
        from . import jit
        info["nvrtc"] = ".".join(map(str, jit.nvrtc_version()))
    except Exception:  # noqa: BLE001
        pass
    info.setdefault("gpus", [])
    return info


def _cmd_info(args: argparse.Namespace) -> int:
    info = environment_info()
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    for key, value in info.items():
        if key == "gpus":
            continue
        print(f"{key:>13}: {value}")
    if info["gpus"]:
        for i, g in enumerate(info["gpus"]):
            print(f"{'gpu ' + str(i):>13}: {g['name']} ({g['sm_count']} SMs, sm_{g['capability']}, "
                  f"{g['memory_gib']} GiB)")
    else:
        print(f"{'gpus':>13}: no GPU")
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    import time

    from . import jit
    from .jit import catalog
    t0 = time.perf_counter()
    done = catalog.build_all(args.arch, args.jobs)
    slowest = max(done, key=lambda x: x[1])
    print(f"built {len(done)} kernel sources for {args.arch or jit.current_arch()} into "
          f"{jit.cache_dir()} in {time.perf_counter() - t0:.1f} s (slowest {slowest[1]:.1f} s: {slowest[0]})")
    return 0


def _build_model(args: argparse.Namespace) -> OverlapModel:
    curve = BandwidthCurve.load(args.curve)
    extra = {}
    if args.model == "refined":
        extra = dict(launch_ms=args.launch_ms, comm_slowdown=args.comm_slowdown,
                     gemm_slowdown=args.gemm_slowdown)
    if args.profile:
        if any(v is not None for v in (args.waves, args.wave_ms, args.bytes_per_wave)):
            raise ProfileError("give either --profile or --waves/--wave-ms/--bytes-per-wave, not both")
        return OverlapModel(GemmProfile.load(args.profile), curve, args.model, **extra)
    missing = [flag for flag, v in (("--waves", args.waves), ("--wave-ms", args.wave_ms),
                                    ("--bytes-per-wave", args.bytes_per_wave)) if v is None]
    if missing:
        raise ProfileError(f"a synthetic profile needs {', '.join(missing)} (or give --profile FILE)")
    return synthetic_model(args.waves, args.wave_ms, args.bytes_per_wave, curve, args.model, **extra)


def format_tune(result: TuneResult) -> str:
    rows = [("chosen", result.choice), ("best overlapped", result.best),
            ("no overlap", result.no_overlap), ("finest", result.finest)]
    width = max(len(str(list(p.partition))) for _, p in rows)
    lines = [f"model {result.choice.model}, {sum(result.choice.partition)} waves, "
             f"search {result.search_ms:.2f} ms", f"{'':<16} {'partition':<{width}}  predicted ms"]
    for name, p in rows:
        lines.append(f"{name:<16} {str(list(p.partition)):<{width}}  {p.total_ms:12.4f}")
    lines.append(f"predicted speedup over no overlap: {result.speedup:.3f}x")
    return "\n".join(lines)


def _cmd_tune(args: argparse.Namespace) -> int:
    result = _build_model(args).tune()
    print(json.dumps(result.to_dict()) if args.json else format_tune(result))
    return 0


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text}")
    return v


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fo_lib", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="versions of Python, torch, cupy, CUDA, NCCL and the GPUs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("build", help="compile every kernel into the cache (parallel; default: this GPU)")
    p.add_argument("--arch", choices=("sm_80", "sm_86", "sm_89", "sm_90a"), help="target (default: this GPU)")
    p.add_argument("--jobs", type=_positive_int, help="parallel compiler processes (default: CPU count)")
    p.set_defaults(func=_cmd_build)

    p = sub.add_parser("tune", help="choose a wave-group partition from a profile and a latency curve")
    p.add_argument("--curve", required=True, help="bandwidth curve JSON ({'points': [[bytes, ms], ...]})")
    p.add_argument("--profile", help="GemmProfile JSON (instead of --waves/--wave-ms/--bytes-per-wave)")
    p.add_argument("--waves", type=_positive_int, help="number of waves T (synthetic profile)")
    p.add_argument("--wave-ms", type=_positive_float, help="duration of one wave in ms (synthetic profile)")
    p.add_argument("--bytes-per-wave", type=_positive_int, help="output bytes per wave (synthetic profile)")
    p.add_argument("--model", choices=MODELS, default="paper")
    p.add_argument("--launch-ms", type=float, default=0.0, help="refined: per-collective launch latency")
    p.add_argument("--comm-slowdown", type=float, default=1.0, help="refined: comm slowdown under compute")
    p.add_argument("--gemm-slowdown", type=float, default=1.0, help="refined: GEMM slowdown under comm")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_tune)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ProfileError, ValueError) as exc:
        print(f"fo_lib {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
