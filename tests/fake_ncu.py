"""A stand-in for Nsight Compute's CLI in CPU tests of the ncu scripts: a profile run
(``... -o REPORT ... [--launch [KERNEL]] ...``) writes REPORT naming the kernel it launched (empty
when the target launches all, or takes no kernel name), an export (``-i REPORT ...``) prints ``pages[kernel]``; every call's
arguments are appended to ``calls.log`` beside it."""
from pathlib import Path


def make(tmp_path: Path, pages: dict) -> Path:
    for kernel, text in pages.items():
        (tmp_path / f"{kernel}.page").write_text(text)
    fake = tmp_path / "ncu"
    fake.write_text(f"""#!/bin/sh
echo "$@" >> "{tmp_path}/calls.log"
kernel=""
while [ $# -gt 0 ]; do
  case "$1" in
    -o) rep="$2"; shift ;;
    -i) cat "{tmp_path}/$(cat "$2").page"; exit 0 ;;
    --launch) case "$2" in -*) ;; *) kernel="$2"; shift ;; esac ;;
  esac
  shift
done
echo "$kernel" > "$rep"
""")
    fake.chmod(0o755)
    return fake


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls.log").read_text().splitlines()
