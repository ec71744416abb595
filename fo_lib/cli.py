"""Command line: ``python -m fo_lib {info,build,gemm-tunings,tune} ...``."""
from __future__ import annotations

import argparse
import json
import sys

from .partition import SearchSizeError, check_search_size
from .provenance import environment_info
from .profiles import PRIMITIVES, ProfileError
from .predictor import MODELS, OverlapModel, TuneResult, synthetic_model
from .records import read_curve, read_profile

# Options only the 'refined' model reads (the 'paper' model is Algorithm 1 as stated) and their
# defaults when not given.
REFINED_OPTIONS = {"launch_ms": 0.0, "comm_slowdown": 1.0, "gemm_slowdown": 1.0}


class CliError(ValueError):
    """Bad input or environment that the command line reports as one line (exit code 2)."""


# What main() reports as ``fo_lib CMD: error: ...`` (exit code 2): validation of what the user gave
# and of the environment. Anything else is a bug and keeps its traceback.
USER_ERRORS = (CliError, ProfileError, SearchSizeError, OSError, UnicodeDecodeError, json.JSONDecodeError)


def _warn(command: str, message: str) -> None:
    print(f"fo_lib {command}: warning: {message}", file=sys.stderr)


def _print_json(doc) -> None:
    """Print ``doc`` as strict JSON: NaN and Infinity are not JSON, so a non-finite number is an error."""
    try:
        text = json.dumps(doc, indent=1, allow_nan=False)
    except ValueError:
        raise CliError("the result holds a non-finite number (NaN or infinity), which JSON cannot carry; "
                       "the inputs are out of range") from None
    print(text)


def _cmd_info(args: argparse.Namespace) -> int:
    info = environment_info()
    if args.json:
        _print_json(info)
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
    from . import kernel_catalog as catalog
    t0 = time.perf_counter()
    try:
        arch = args.arch or jit.current_arch()
        done = catalog.build_all(arch, args.jobs, progress=True)
    except jit.KernelCompileError as exc:
        raise CliError(str(exc)) from None
    except jit.CudaUnavailableError as exc:
        hint = "" if args.arch else f"; --arch sm_XX ({', '.join(BUILD_ARCHS)}) compiles without a GPU"
        raise CliError(f"{exc}{hint}") from None
    slowest = max(done, key=lambda x: x[1])
    print(f"built {len(done)} kernel sources for {arch} into "
          f"{jit.cache_dir()} in {time.perf_counter() - t0:.1f} s (slowest {slowest[1]:.1f} s: {slowest[0]})")
    return 0


def _cmd_gemm_tunings(args: argparse.Namespace) -> int:
    """An unreadable tunings file is one line and exit 0: autotuning reads it as empty and rewrites it,
    so nothing is broken that the user must fix."""
    from .gemm import config_tuning, sm90

    path = config_tuning.cache_path()
    problem = config_tuning.read_file(path)[1]
    if args.clear:
        n = config_tuning.clear()
        print(f"removed the unreadable Hopper GEMM tunings file {path} ({problem})" if problem is not None
              else f"removed {n} remembered Hopper GEMM tunings ({path})")
        return 0
    if problem is not None:
        if args.json:
            _print_json(dict(path=str(path), tunings=[], unreadable=problem))
        else:
            print(f"unreadable Hopper GEMM tunings file {path} ({problem}): autotuning ignores it and rewrites "
                  "it at the next tuning; --clear deletes it")
        return 0
    current = {}  # dtype -> the digest tunings of this tree's kernels are remembered under
    rows = []
    for k, where, cfg, entry in config_tuning.remembered(sm90.Sm90Config):
        if where is None or cfg is None:
            rows.append(dict(key=k, stale=True))
            continue
        if where["dtype"] not in current:
            current[where["dtype"]] = sm90.kernel_digest(where["dtype"])
        rows.append(dict(where, config=sm90.config_label(cfg), model=entry.get("model"), ms=entry.get("ms") or {},
                         date=entry.get("date"), stale=where["digest"] != current[where["dtype"]]))
    if args.json:
        _print_json(dict(path=str(path), tunings=rows))
        return 0
    if not rows:
        print(f"no remembered Hopper GEMM tunings in {path}")
        return 0
    print(f"{len(rows)} remembered Hopper GEMM tunings in {path} (first plain call of a shape; "
          "FO_SM90_AUTOTUNE=0 turns it off):")
    for r in rows:
        if "config" not in r:
            print(f"  {r['key']}: unreadable entry (another version), tuned again when met")
            continue
        ms = r["ms"]
        gain = (f", {ms[r['model']] / ms[r['config']]:.3f}x the model's {r['model']}"
                if r["model"] != r["config"] and r["model"] in ms and r["config"] in ms else " (the model's pick)")
        print(f"  {r['gpu']}, {r['ctas']} CTAs, {r['M']} x {r['N']} x {r['K']} {r['dtype']}: {r['config']}"
              f"{gain}" + (" [another kernel version: unused]" if r["stale"] else ""))
    return 0


def _build_model(args: argparse.Namespace) -> OverlapModel:
    given = [name for name in REFINED_OPTIONS if getattr(args, name) is not None]
    if args.model == "paper" and given:
        _warn("tune", f"--model paper ignores {', '.join('--' + n.replace('_', '-') for n in given)} "
                      f"(only --model refined reads {'it' if len(given) == 1 else 'them'})")
    if args.waves is not None:  # before building a profile of that many waves
        check_search_size(args.waves)
    profile = primitive = None
    if args.profile:
        if any(v is not None for v in (args.waves, args.wave_ms, args.bytes_per_wave)):
            raise CliError("give either --profile or --waves/--wave-ms/--bytes-per-wave, not both")
        profile, primitive, budget = read_profile(args.profile, args.shape, args.primitive, _budget(args.budget))
    if args.curve is None and primitive is None:
        raise CliError("--curve is needed (a curve JSON, a <record>_profiles.json or nccl_curves.csv)")
    if args.curve is None:  # the bundle's own curve for the profile's primitive and budget
        curve = read_curve(args.profile, primitive, args.world, budget)
    else:
        curve = read_curve(args.curve, args.primitive or primitive, args.world, _budget(args.budget))
    falling = curve.falling_points()
    if falling:
        i = falling[0]
        (b0, t0), (b1, t1) = curve.points[i - 1], curve.points[i]
        _warn("tune", f"{args.curve or args.profile}: latency falls as bytes grow at {len(falling)} point(s), first at "
                      f"point {i} ({b1:.0f} bytes, {t1:g} ms < {t0:g} ms at {b0:.0f} bytes); "
                      f"predictions between them are suspect")
    extra = {}
    if args.model == "refined":
        extra = {name: default if getattr(args, name) is None else getattr(args, name)
                 for name, default in REFINED_OPTIONS.items()}
    if profile is not None:
        return OverlapModel(profile, curve, args.model, **extra)
    missing = [flag for flag, v in (("--waves", args.waves), ("--wave-ms", args.wave_ms),
                                    ("--bytes-per-wave", args.bytes_per_wave)) if v is None]
    if missing:
        raise CliError(f"a synthetic profile needs {', '.join(missing)} (or give --profile FILE)")
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
    import math

    import numpy as np
    # An overflow is reported below as one error line, not as NumPy's warning on top of it.
    with np.errstate(over="ignore", invalid="ignore"):
        result = _build_model(args).tune()
    times = [p.total_ms for p in (result.best, result.no_overlap, result.finest)]
    if not all(math.isfinite(t) for t in times):
        raise CliError(f"the predicted times are not finite ({', '.join(f'{t:g}' for t in times)} ms): "
                       "an input is too large for the model")
    if args.json:
        try:
            print(json.dumps(result.to_dict(), allow_nan=False))
        except ValueError:
            raise CliError("the result holds a non-finite number, which JSON cannot carry") from None
    else:
        print(format_tune(result))
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    import time

    from .calibration import offline
    parts = [p.strip() for p in args.parts.split(",") if p.strip()] if args.parts is not None else list(offline.PARTS)
    bad = [p for p in parts if p not in offline.PARTS]
    if bad or not parts:
        raise CliError(f"--parts takes a comma-separated subset of {','.join(offline.PARTS)}, got {args.parts!r}")
    t0 = time.perf_counter()
    try:
        report = offline.calibrate(parts, quick=args.quick, force=args.force, record=args.record)
    except offline.CalibrationError as exc:
        raise CliError(str(exc)) from None
    print(f"calibrate: {time.perf_counter() - t0:.1f} s in all")
    ran = [p for p, r in report.items() if not isinstance(r, str) or r == "done earlier"]
    if not ran:
        _warn("calibrate", "nothing could be calibrated on this machine: " + "; ".join(
            f"{p} {r}" for p, r in report.items()))
        return 1
    return 0


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def _shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected MxNxK with positive integers, got {text!r}")
    return tuple(int(p) for p in parts)


def _budget(text: str | None) -> int | str | None:
    # A budget is a small count: a longer numeral stays text (it matches no record) short of int()'s digit limit.
    return int(text) if text is not None and text.lstrip("-").isdigit() and len(text) < 20 else text


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text}")
    return v


def _number_at_least(low: float, what: str):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not low <= v < float("inf"):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return v
    return parse


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (the usage is one ``--help`` away)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


BUILD_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90a")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m fo_lib", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="versions of Python, torch, cupy, CUDA, NCCL and the GPUs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("build", help="compile every kernel into the cache (parallel; default: this GPU)")
    p.add_argument("--arch", choices=BUILD_ARCHS, help="target (default: this GPU; with --arch no GPU is needed)")
    p.add_argument("--jobs", type=_positive_int, help="parallel compiler processes (default: CPU count)")
    p.set_defaults(func=_cmd_build)

    p = sub.add_parser("gemm-tunings", help="list (or --clear) the Hopper GEMM configs autotuning remembered",
                       description="List the Hopper GEMM configs autotuning remembered, or --clear them. An "
                       "unreadable file (not JSON, another shape, nested too deeply) is listed as such in one "
                       "line with exit status 0: autotuning ignores it and rewrites it at the next tuning.")
    p.add_argument("--clear", action="store_true", help="delete them (the file, whatever it holds): every shape "
                   "is timed again on first use")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_gemm_tunings)

    p = sub.add_parser("calibrate", help="the offline phase for this GPU: tile table, overlap sweep, model fit",
                       description="Measure what the library needs for this GPU (the Hopper GEMM's tile "
                       "table, an overlap sweep over the emulated link: GEMM wave profiles, link curves and "
                       "candidate partitions, then the refined model's constants fitted on them) into the "
                       "user's cache, where every table and curve lookup finds it first. A killed run "
                       "resumes at the first unfinished part.")
    p.add_argument("--quick", action="store_true", help="fewer K in the tile table, a shorter overlap sweep")
    p.add_argument("--parts", help="comma-separated subset of tiles,overlap,model,nccl (default: all)")
    p.add_argument("--force", action="store_true", help="measure every part again, finished or not")
    p.add_argument("--record", action="store_true", help="also copy the results into the repository's "
                   "data/<gpu>/ (data/<gpu>-quick/ with --quick)")
    p.set_defaults(func=_cmd_calibrate)

    p = sub.add_parser("tune", help="choose a wave-group partition from a profile and a latency curve")
    p.add_argument("--curve", help="latency curve: a curve JSON ({'points': [[bytes, ms], ...]}), a sweep's "
                   "<record>_profiles.json or nccl_curves.csv (default: the --profile bundle's curve)")
    p.add_argument("--profile", help="GEMM profile: a profile JSON or a sweep's <record>_profiles.json "
                   "(instead of --waves/--wave-ms/--bytes-per-wave)")
    p.add_argument("--shape", type=_shape, help="MxNxK: which profile of a bundle")
    p.add_argument("--primitive", choices=PRIMITIVES, help="which profile and curve of a record")
    p.add_argument("--world", type=_positive_int, help="which world size of a curves table")
    p.add_argument("--budget", help="which NCCL CTA budget of a record (0, 8, 16, copy_engine)")
    p.add_argument("--waves", type=_positive_int, help="number of waves T (synthetic profile)")
    p.add_argument("--wave-ms", type=_positive_float, help="duration of one wave in ms (synthetic profile)")
    p.add_argument("--bytes-per-wave", type=_positive_int, help="output bytes per wave (synthetic profile)")
    p.add_argument("--model", choices=MODELS, default="paper")
    p.add_argument("--launch-ms", type=_number_at_least(0.0, "a finite number >= 0"),
                   help="refined: per-collective launch latency (default 0)")
    p.add_argument("--comm-slowdown", type=_number_at_least(1.0, "a finite factor >= 1"),
                   help="refined: comm slowdown under compute (default 1)")
    p.add_argument("--gemm-slowdown", type=_number_at_least(1.0, "a finite factor >= 1"),
                   help="refined: GEMM slowdown under comm (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_tune)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except USER_ERRORS as exc:
        print(f"fo_lib {args.command}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
