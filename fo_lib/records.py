"""Reading the offline phase's stored results in every format the project writes, by what they are
for: a GEMM's wave profile and a collective's latency curve.

* a single :class:`~fo_lib.profiles.GemmProfile` or :class:`~fo_lib.profiles.BandwidthCurve` JSON
  (``python -m fo_lib tune``'s own form, ``GemmProfile.save``);
* a sweep's bundle ``<record>_profiles.json`` (``scripts/bench/bench_overlap.py``,
  ``bench_nccl.py``, ``scripts/record/record_figures.py``): ``{"profiles": [...], "curves":
  {primitive: curve}}``, or one such bundle per NCCL CTA budget ``{"0": {...}, "8": {...}}``;
* the NCCL curves table ``nccl_curves.csv`` (``bench_nccl.py``): one row per (primitive, world,
  NCCL CTA budget, bytes) with the latency in ms.

Pure (NumPy and the standard library): the CLI and the notebooks' replays read through here.
"""
from __future__ import annotations

import csv
from pathlib import Path

from .profiles import BandwidthCurve, GemmProfile, ProfileError, _read_json

__all__ = ["bundle", "read_curve", "read_profile"]


def _budget(key: str) -> int | str:
    # A budget is a small count: a longer numeral stays text (it matches nothing) short of int()'s digit limit.
    return int(key) if key.lstrip("-").isdigit() and len(key) < 20 else key


def bundle(path: str | Path) -> tuple[dict, dict]:
    """A ``<record>_profiles.json`` as ``{(budget, primitive, M, N, K): GemmProfile}`` and
    ``{(budget, primitive): BandwidthCurve}``; a bundle without NCCL CTA budgets (one GPU) counts
    as budget 0."""
    saved = _read_json(path)
    if not isinstance(saved, dict):
        raise ProfileError(f"{path}: not a profile bundle (expected a JSON object)")
    per_budget = {"0": saved} if "profiles" in saved else saved
    profiles, curves = {}, {}
    for budget, part in per_budget.items():
        if not isinstance(part, dict) or not isinstance(part.get("profiles"), list):
            raise ProfileError(f"{path}: not a profile bundle ({budget!r} holds no 'profiles' list)")
        budget = _budget(budget)
        part_curves = part.get("curves") or {}
        if not isinstance(part_curves, dict):
            raise ProfileError(f"{path}: 'curves' of {budget!r} must be an object of primitive: curve")
        for prim, doc in part_curves.items():
            if not isinstance(doc, dict):
                raise ProfileError(f"{path} curve {prim}: expected an object, got {type(doc).__name__}")
            curves[(budget, prim)] = BandwidthCurve.from_dict(doc, where=f"{path} curve {prim}")
        for i, doc in enumerate(part["profiles"]):
            if not isinstance(doc, dict):
                raise ProfileError(f"{path} profile {i}: expected an object, got {type(doc).__name__}")
            doc = dict(doc)
            prim = doc.pop("primitive", None)
            p = GemmProfile.from_dict(doc, where=f"{path} profile {i}")
            profiles[(budget, prim, p.M, p.N, p.K)] = p
    return profiles, curves


def _order(value) -> tuple:
    return (not isinstance(value, int), value if isinstance(value, int) else 0, str(value))


def _is_bundle(doc) -> bool:
    return isinstance(doc, dict) and ("profiles" in doc or all(
        isinstance(v, dict) and "profiles" in v for v in doc.values()) and bool(doc))


def _pick(found: dict, what: str, path, **want):
    """The one entry of ``found`` (keyed by tuples named as in ``want``) that matches every given
    selector, or a one-line error naming what there is."""
    names = list(want)
    hits = {k: v for k, v in found.items()
            if all(want[n] is None or k[i] == want[n] for i, n in enumerate(names))}
    if len(hits) == 1:
        return next(iter(hits.items()))
    given = " ".join(f"{n}={v}" for n, v in want.items() if v is not None) or "no selection"
    holds = "; ".join(f"{n} " + ", ".join(map(str, sorted({k[i] for k in found}, key=_order)))
                      for i, n in enumerate(names) if len({k[i] for k in found}) > 1 or want[n] is not None)
    problem = f"no {what}" if not hits else f"{len(hits)} {what}s"
    raise ProfileError(f"{path}: {problem} for {given}; it holds {holds or 'one ' + what}")


def read_profile(path: str | Path, shape: tuple[int, int, int] | None = None, primitive: str | None = None,
                 budget: int | str | None = None) -> tuple[GemmProfile, str | None, int | str | None]:
    """A GEMM profile from a profile JSON or a bundle (choose with ``shape`` (M, N, K),
    ``primitive``, ``budget`` where it holds several); returns (profile, its primitive, its
    budget), the last two None for a single profile."""
    doc = _read_json(path)
    if not _is_bundle(doc):
        return GemmProfile.from_dict(doc, where=str(path)), None, None
    profiles, _ = bundle(path)
    M, N, K = shape if shape is not None else (None, None, None)
    key, profile = _pick(profiles, "profile", path,
                         budget=budget, primitive=primitive, M=M, N=N, K=K)
    return profile, key[1], key[0]


def read_curve(path: str | Path, primitive: str | None = None, world: int | None = None,
               budget: int | str | None = None) -> BandwidthCurve:
    """A latency curve from a curve JSON, a bundle's curves, or ``nccl_curves.csv`` (choose with
    ``primitive``, ``world`` and the NCCL CTA ``budget`` where it holds several)."""
    path = Path(path)
    if path.suffix == ".csv":
        return _curve_from_csv(path, primitive, world, budget)
    doc = _read_json(path)
    if not _is_bundle(doc):
        curve = BandwidthCurve.from_dict(doc, where=str(path))
        if world is not None and world != curve.world_size:  # a world asked for is not one to ignore
            raise ProfileError(f"{path}: a curve of world size {curve.world_size}, not the {world} asked for")
        return curve
    _, curves = bundle(path)
    found = {(b, p, c.world_size): c for (b, p), c in curves.items()}
    return _pick(found, "curve", path, budget=budget, primitive=primitive, world=world)[1]


def _curve_from_csv(path: Path, primitive, world, budget) -> BandwidthCurve:
    try:
        rows = list(csv.DictReader(path.read_text().splitlines()))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ProfileError(f"{path}: cannot read a curves table ({exc})") from None
    need = {"primitive", "world", "bytes", "ms"}
    if not rows or not need <= set(rows[0]):
        raise ProfileError(f"{path}: a curves table needs the columns {sorted(need)}")
    points: dict[tuple, list] = {}
    try:
        for r in rows:
            key = (_budget(r.get("nccl_max_ctas") or "0"), r["primitive"], int(r["world"]))
            points.setdefault(key, []).append([float(r["bytes"]), float(r["ms"])])
    except (ValueError, TypeError) as exc:  # TypeError: a short row's missing cells read as None
        raise ProfileError(f"{path}: a row that is short or not a number ({exc})") from None
    (b, prim, w), pts = _pick(points, "curve", path, budget=budget, primitive=primitive, world=world)
    return BandwidthCurve.from_dict({"primitive": prim, "world_size": w, "link": f"NCCL ({w} GPUs)",
                                     "points": sorted(pts), "meta": {"source": str(path), "budget": b}},
                                    where=str(path))

