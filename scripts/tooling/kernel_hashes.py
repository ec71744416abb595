"""Did an edit change any compiled kernel? Compiles the kernel catalog's compile-check sources of
one architecture from a source tree (its own ``fo_lib``) and prints one line per kernel: its label
and the sha256 of the cubin. Two trees' outputs compare with ``diff``: comment, constexpr or layout
edits that leave every cubin alone need no new GPU run. CPU only (NVRTC); ~1 s per kernel.

    python scripts/tooling/kernel_hashes.py --root . --only gemm_sm90 > /tmp/new.txt
    python scripts/tooling/kernel_hashes.py --root .baseline --only gemm_sm90 > /tmp/old.txt
    diff /tmp/old.txt /tmp/new.txt
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", type=Path, default=Path("."), help="the source tree (a directory with fo_lib)")
    p.add_argument("--arch", default="sm_90a", help="NVRTC architecture (default sm_90a)")
    p.add_argument("--only", default="", help="kernels whose label contains this")
    args = p.parse_args(argv)
    if not (args.root / "fo_lib" / "__init__.py").is_file():
        p.error(f"{args.root} has no fo_lib package")
    sys.path.insert(0, str(args.root.resolve()))
    from fo_lib import jit
    from fo_lib import kernel_catalog as catalog

    if not str(Path(jit.__file__).resolve()).startswith(str(args.root.resolve())):
        p.error(f"imported fo_lib from {jit.__file__}, not from {args.root}: run in a fresh process")
    for label, src in catalog.compile_check_sources(args.arch):
        if args.only in label:
            print(f"{label}\t{hashlib.sha256(jit.cached_compile(src, args.arch)[0]).hexdigest()}", flush=True)


if __name__ == "__main__":
    main()
