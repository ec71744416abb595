"""The overlap sweep's files: the refined model's parameters it starts from
(:func:`load_model_params`) and the records it writes (:func:`write_records`)."""
from __future__ import annotations

import json

from ..measure_common import LINK


def load_model_params(spec: str, auto_path) -> dict | None:
    """The refined model's parameters per primitive for a benchmark: ``spec`` is a JSON file (a
    calibration sidecar's ``fitted_on_all_shapes``, or the mapping itself), or ``"auto"``: the
    sidecar at ``auto_path`` if it exists (fitted on an earlier run), else None (the defaults)."""
    from pathlib import Path

    path = Path(auto_path) if spec == "auto" else Path(spec)
    if not path.exists():
        if spec != "auto":
            raise FileNotFoundError(f"no model parameters at {path}")
        return None
    doc = json.loads(path.read_text())
    return doc.get("fitted_on_all_shapes", doc)


def write_records(summary, cands, saved, out_csv, *, world: int, comm_sms: int, link: str = LINK, **meta):
    """The three records of one measurement: ``<out>.csv``, ``<out>_candidates.csv`` (each with a
    provenance sidecar) and ``<out>_profiles.json`` (+ sidecar)."""
    from pathlib import Path

    from ..._util import atomic_write
    from ...provenance import write_result

    out = Path(out_csv)
    write_result(summary, out, world_size=world, link=link, comm_sms=comm_sms, **meta)
    write_result(cands, out.with_name(out.stem + "_candidates.csv"), world_size=world, link=link,
                 comm_sms=comm_sms, **meta)
    profiles = out.with_name(out.stem + "_profiles.json")
    atomic_write(profiles, (json.dumps(saved, indent=1) + "\n").encode())
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    atomic_write(profiles.with_suffix(".meta.json"),
                 (json.dumps(meta | {"note": "GEMM profiles and link curves"}, indent=1) + "\n").encode())
    return out
