"""Registers, spills and the main loop's instructions of the portable GEMM, from its cubin (no GPU).

Each (config, epilogue) is compiled through NVRTC exactly as fo_lib builds it; ptxas reports
registers and spills; with ``nvdisasm`` (PATH, ``--nvdisasm``, or the ``nvidia-cuda-nvdisasm``
wheel) the k-loop's SASS is found (the innermost backward branch around the HMMAs) and its hot
path is counted: every instruction of the loop except the blocks only taken once per tile (the
cursor's move to the next tile), and compared with the first epilogue's as an opcode sequence
(1.000: the same schedule; the parsing is :mod:`fo_lib.reports.sass`). This is how epilogues are compared
(docs/decisions.md, "An epilogue change is judged by its k-loop's SASS first").

    python scripts/profile/sass_report.py                                    # 256x128x64, every instantiation
    python scripts/profile/sass_report.py --config 128x256x64 --epilogues plain signal_store --arch sm_80
    python scripts/profile/sass_report.py --dump /tmp/sass                   # also write the .sass files
    python scripts/profile/sass_report.py --sm90                             # the Hopper kernel, every config
    python scripts/profile/sass_report.py --sm90 128x256x64 128x176x64p --epilogues plain signal

``--sm90``: the Hopper kernel's consumer k-loop (the innermost loop around its HGMMAs) per config and
epilogue: instructions, HGMMAs and R2URs (a wgmma descriptor built in vector registers and moved to
a uniform one in every k-block; where ptxas proves the loop warp-uniform it builds them on the
uniform datapath and there are none).
"""
from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fo_lib import gemm, jit  # noqa: E402
from fo_lib.reports.sass import hot_sequence, instruction_count, k_loop, opcodes, similarity  # noqa: E402


def find_nvdisasm(given: str | None) -> str | None:
    if given:
        return given
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:  # the nvidia-cuda-nvdisasm wheel
        import nvidia
        for root in nvidia.__path__:
            for cand in Path(root).glob("*/bin/nvdisasm"):
                return str(cand)
    except ImportError:
        pass
    return None


def compile_counted(src: str, arch: str) -> tuple[bytes, int, int]:
    """``(cubin, registers, spill store bytes)`` of ``src`` as fo_lib compiles it, from ptxas' report."""
    cubin, log = jit.cached_compile(src, arch)
    return (cubin, int(re.search(r"Used (\d+) registers", log).group(1)),
            int(re.search(r"(\d+) bytes spill stores", log).group(1)))


def refuse(what: str, bad: list, allowed) -> int:
    """One line on stderr naming what is not ``what`` (and what is), exit status 2."""
    print(f"sass_report: not {what}: {', '.join(bad)} (one of {', '.join(allowed)})", file=sys.stderr)
    return 2


def disassemble(disasm: str, cubin: bytes, name: str, dump: Path | None) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(dump or tmp) / f"{name}.cubin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(cubin)
        sass = subprocess.run([disasm, "-c", str(path)], check=True, capture_output=True, text=True).stdout
        if dump:
            path.with_suffix(".sass").write_text(sass)
    return sass


def sm90_counts(cfg, epilogue: str, dtype: str, disasm: str | None, dump: Path | None = None) -> dict:
    """``regs``, ``spill`` (bytes) of the Hopper kernel ``cfg`` / ``epilogue``; with ``disasm`` also
    ``loop`` (instructions of the consumers' k-loop), ``HGMMA`` and ``R2UR`` (in it)."""
    from fo_lib.gemm import sm90

    src, kname = sm90.generate_source(cfg, dtype, epilogue)
    cubin, regs, spill = compile_counted(src, "sm_90a")
    out = dict(regs=regs, spill=spill)
    if disasm:
        loop = k_loop(disassemble(disasm, cubin, kname, dump), mma="HGMMA")
        ops = opcodes(loop)  # the whole loop: its MMAs may sit in a block a branch skips (a phantom's)
        out.update(loop=instruction_count(loop), HGMMA=ops["HGMMA"], R2UR=ops["R2UR"])
    return out


def sm90_report(names, epilogues, dtype, disasm, dump) -> int:
    """One line per (config, epilogue) of the Hopper kernel (see the module's docstring)."""
    from fo_lib.gemm import sm90

    variants = sm90.compiled_variants()  # the configs, and NAME+sk: the single-CTA ones with their tail
    unknown = [n for n in names if n not in variants]
    if unknown:
        return refuse("an sm90 config", unknown, variants)
    print(f"sm90 {dtype} sm_90a" + ("" if disasm else "  (no nvdisasm: registers only)"))
    print(f"{'config':16s} {'epilogue':13s} {'regs':>5s} {'spill B':>8s} {'loop':>6s} {'HGMMA':>6s} {'R2UR':>5s}")
    for name in names:
        for epi in epilogues:
            if epi not in sm90.variant_epilogues(variants[name]):
                continue  # not compiled: with a stream-K tail only the plain store is
            n = sm90_counts(variants[name], epi, dtype, disasm, dump)
            row = f"{name:16s} {epi:13s} {n['regs']:5d} {n['spill']:8d}"
            if disasm:
                row += f" {n['loop']:6d} {n['HGMMA']:6d} {n['R2UR']:5d}"
            print(row)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sm90", nargs="*", metavar="CONFIG",
                    help="the Hopper kernel instead: these sm90 configs (none named: every one; NAME+sk: a "
                         "single-CTA config with its stream-K tail compiled in), epilogues from --epilogues (default plain)")
    ap.add_argument("--config", default="256x128x64", choices=sorted(gemm.CONFIGS))
    ap.add_argument("--epilogues", nargs="*", help=f"default every one: {', '.join(gemm.PORTABLE_KERNELS)} "
                    f"(--sm90: plain; its epilogues are {', '.join(gemm.EPILOGUES)})")
    ap.add_argument("--dtype", default="bf16", choices=gemm.DTYPES)
    ap.add_argument("--arch", default="sm_90a", choices=jit.ARCHS)
    ap.add_argument("--nvdisasm", help="path of nvdisasm (default: PATH, then the nvidia-cuda-nvdisasm wheel)")
    ap.add_argument("--dump", type=Path, help="folder for the cubins and their SASS")
    args = ap.parse_args(argv)

    disasm = find_nvdisasm(args.nvdisasm)
    if args.sm90 is not None:
        from fo_lib.gemm import sm90
        epis = args.epilogues or ["plain"]
        bad = [e for e in epis if e not in gemm.EPILOGUES]
        if bad:
            return refuse("an sm90 epilogue", bad, gemm.EPILOGUES)
        return sm90_report(args.sm90 or list(sm90.CONFIGS), epis, args.dtype, disasm, args.dump)
    if args.epilogues is None:
        args.epilogues = list(gemm.PORTABLE_KERNELS)
    bad = [e for e in args.epilogues if e not in gemm.PORTABLE_KERNELS]
    if bad:
        return refuse("a portable kernel", bad, gemm.PORTABLE_KERNELS)
    cfg = gemm.CONFIGS[args.config]
    print(f"{cfg.tile_name} {args.dtype} {args.arch}" + ("" if disasm else "  (no nvdisasm: registers only)"))
    ref = args.epilogues[0] if args.epilogues else None
    print(f"{'epilogue':14s} {'regs':>5s} {'spill B':>8s} {'loop':>6s} {'hot':>5s} {'HMMA':>5s} {'LDSM':>5s} "
          f"{'LDGSTS':>7s}  hot path like {ref}")
    ref_hot = None
    for epi in args.epilogues:
        src, _ = gemm.generate_source(cfg, args.dtype, epi)
        cubin, regs, spill = compile_counted(src, args.arch)
        row = f"{epi:14s} {regs:5d} {spill:8d}"
        if disasm:
            sass = disassemble(disasm, cubin, f"{cfg.tile_name}_{args.dtype}_{epi}_{args.arch}", args.dump)
            loop = k_loop(sass)
            seq = hot_sequence(loop)
            hot = collections.Counter(op.split(".")[0] for op in seq)
            ref_hot = seq if ref_hot is None else ref_hot
            n_loop = instruction_count(loop)
            row += (f" {n_loop:6d} {len(seq):5d} {hot['HMMA']:5d} {hot['LDSM']:5d} {hot['LDGSTS']:7d}"
                    f"  {similarity(ref_hot, seq):.3f}")
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
