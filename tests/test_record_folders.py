"""A quick record (the small grids) never lands in a full data folder, nor a full one in a ``-quick``
folder: the notebooks replay ``data/<data_set>/`` as what its name says."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("flags, folder, needle", [
    (["--quick"], "h200", "a quick record belongs in a folder named *-quick"),
    ([], "h200-quick", "a full record belongs in a folder not named *-quick"),
])
def test_record_figures_refuses_the_wrong_folder_before_measuring(tmp_path, flags, folder, needle):
    res = subprocess.run([sys.executable, str(ROOT / "scripts/record/record_figures.py"), *flags,
                          "--out-dir", str(tmp_path / folder)], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.splitlines() == [f"record_figures.py: error: {needle}, not {tmp_path / folder}"]
    assert not (tmp_path / folder).exists()


def test_records_refuse_a_folder_of_the_other_kind(tmp_path):
    from fo_lib.experiments import ablation, heatmap
    df = pd.DataFrame({"world": [2], "link": ["emulated"], "M": [256]})
    with pytest.raises(ValueError, match="quick record belongs in a folder named"):
        ablation.record(df, tmp_path / "h200", quick=True)
    with pytest.raises(ValueError, match="full record belongs in a folder not named"):
        heatmap.record(df, df, {}, tmp_path / "h200-quick", quick=False)
    assert list(tmp_path.iterdir()) == []
    assert ablation.record(df, tmp_path / "h200-quick", quick=True).exists()  # the right folder


def _quick_sidecars_in_full_folders() -> list[str]:
    wrong = []
    for meta in sorted((ROOT / "data").glob("*/*.meta.json")):
        quick = json.loads(meta.read_text()).get("quick")
        if quick is not None and bool(quick) != meta.parent.name.endswith("-quick"):
            wrong.append(meta.relative_to(ROOT).as_posix())
    return wrong


def test_only_the_known_records_sit_in_a_folder_of_the_other_kind():
    # Until the full record replaces them, no other quick record may join them.
    assert _quick_sidecars_in_full_folders() == [
        "data/h200/ablation.meta.json", "data/h200/heatmap.meta.json", "data/h200/heatmap_candidates.meta.json",
        "data/h200/heatmap_profiles.meta.json"]
