"""Every figure, CSV, JSON and sidecar the project writes goes through one atomic path: a temporary
file in the target's folder, renamed over the target, so an interrupted writer leaves the old file or
none, never a truncated one."""
import json
import os

import pytest

pd = pytest.importorskip("pandas")


@pytest.fixture
def replaces(monkeypatch):
    """The targets os.replace renamed onto, and the temporary names it renamed from."""
    done = []
    real = os.replace

    def counting(src, dst):
        done.append((os.fspath(src), os.fspath(dst)))
        return real(src, dst)
    monkeypatch.setattr(os, "replace", counting)
    return done


def test_atomic_path_leaves_the_old_file_when_the_writer_raises(tmp_path):
    from fo_lib._util import atomic_path
    target = tmp_path / "fig.png"
    target.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half a fi")
            raise KeyboardInterrupt
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["fig.png"]
    with pytest.raises(ValueError):
        with atomic_path(tmp_path / "new.csv") as tmp:
            raise ValueError("the writer failed before writing")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png"]


def test_atomic_path_writes_a_temporary_of_the_same_suffix_beside_the_target(tmp_path):
    from fo_lib._util import atomic_path
    target = tmp_path / "fig.svg"
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".svg" and tmp != target
        tmp.write_text("<svg/>")
        assert not target.exists()
    assert target.read_text() == "<svg/>" and sorted(p.name for p in tmp_path.iterdir()) == ["fig.svg"]
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())  # a plain file's mode


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_figures_are_written_atomically(tmp_path, replaces):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fo_lib.experiments.common import save
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    paths = save(fig, "line", tmp_path)
    plt.close(fig)
    assert [d for _, d in replaces] == [str(p) for p in paths]
    assert all(os.path.dirname(s) == str(tmp_path) and s.endswith(os.path.splitext(d)[1]) for s, d in replaces)
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and b"<svg" in paths[1].read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["line.png", "line.svg"]


def test_csv_and_sidecar_are_written_atomically(tmp_path, replaces):
    from fo_lib.provenance import write_result
    out = write_result(pd.DataFrame({"a": [1, 2]}), tmp_path / "r.csv", link="none")
    assert [d for _, d in replaces] == [str(out), str(tmp_path / "r.meta.json")]
    assert pd.read_csv(out).a.tolist() == [1, 2] and json.loads((tmp_path / "r.meta.json").read_text())["link"] == "none"


def test_profiles_curves_and_bundles_are_written_atomically(tmp_path, replaces):
    from fo_lib.experiments.overlap_measure.records import write_records
    from fo_lib.profiles import BandwidthCurve, GemmProfile
    GemmProfile.synthetic(2, 0.5, 1000).save(tmp_path / "p.json")
    BandwidthCurve(points=((1, 1.0), (2, 2.0))).save(tmp_path / "c.json")
    write_records(pd.DataFrame({"a": [1]}), pd.DataFrame({"b": [2]}), {"profiles": []}, tmp_path / "o.csv",
                  world=2, comm_sms=0)
    names = [os.path.basename(d) for _, d in replaces]
    assert names == ["p.json", "c.json", "o.csv", "o.meta.json", "o_candidates.csv", "o_candidates.meta.json",
                     "o_profiles.json", "o_profiles.meta.json"]
    assert GemmProfile.load(tmp_path / "p.json").num_waves == 2 and BandwidthCurve.load(tmp_path / "c.json")


# A file writer's call and what it writes to: the path of write_text/write_bytes, else the argument
# naming the file.
WRITERS = [
    r"([\w.()\"'\[\]]+?)\.write_(?:text|bytes)\(",
    r"\.savefig\(\s*([\w.]+)",
    r"\.to_(?:csv|json|parquet)\(\s*([\w.]+)",
    r"\bjson\.dump\([^,]+,\s*([\w.]+)",
    r"\bnbformat\.write\([^,]+,\s*([\w.]+)",
    r"\bopen\(\s*([\w.]+)[^)]*[\"'][wax]",
]
# Writes that are not records: a buffer in memory, or a scratch file in a temporary folder for a tool.
NOT_RECORDS = {"buf", "tmp"}
SCRATCH = {("scripts/profile/sass_report.py", "path")}  # a cubin in a TemporaryDirectory for nvdisasm; its
# .sass dump is a text listing for people, not a record the project reads back


def test_every_writer_goes_through_atomic_path():
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    files = [*sorted((root / "fo_lib").rglob("*.py")), *sorted((root / "scripts").rglob("*.py")),
             *sorted((root / "notebooks").glob("[0-9][0-9]_*.py"))]
    raw = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for pattern in WRITERS:
                for target in re.findall(pattern, line):
                    if target not in NOT_RECORDS and (rel, re.split(r"[.(]", target)[0]) not in SCRATCH:
                        raw.append(f"{rel}:{n}: {line.strip()}")
    assert raw == [], "write through fo_lib._util.atomic_path (or atomic_write):\n" + "\n".join(raw)
