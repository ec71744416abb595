"""Figures depend on the recorded data alone, so regenerating them leaves git clean: no committed
figure carries a date or a software version (either would change every figure on every run or
upgrade), nor does what ``ex.save`` writes now. (Every notebook's replay drawing the committed bytes:
tests/test_notebooks.py.)"""
import re
import struct
from pathlib import Path

import pytest

from fo_lib.experiments import common

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "figures"
PNGS = sorted(FIGURES.glob("*.png"))
SVGS = sorted(FIGURES.glob("*.svg"))
# PNG chunks that hold free text or a modification time (matplotlib's Software, Creation Time...).
PNG_TEXT_CHUNKS = {b"tEXt", b"iTXt", b"zTXt", b"tIME"}


def png_text_chunks(data: bytes) -> list[tuple[str, bytes]]:
    """The text and time chunks of a PNG, as (type, payload)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    found, i = [], 8
    while i < len(data):
        size, kind = struct.unpack(">I4s", data[i:i + 8])
        if kind in PNG_TEXT_CHUNKS:
            found.append((kind.decode(), data[i + 8:i + 8 + size]))
        i += 12 + size  # length, type, payload, CRC
    return found


def svg_stamps(text: str) -> list[str]:
    """Whatever in an SVG names a date or matplotlib's version."""
    return re.findall(r"<dc:date>[^<]*|Matplotlib v[\w.+]+", text)


def test_figures_are_committed():
    assert len(PNGS) >= 8 and [p.stem for p in PNGS] == [p.stem for p in SVGS]


@pytest.mark.parametrize("png", PNGS, ids=[p.name for p in PNGS])
def test_committed_png_holds_no_date_or_version(png):
    assert png_text_chunks(png.read_bytes()) == []


@pytest.mark.parametrize("svg", SVGS, ids=[p.name for p in SVGS])
def test_committed_svg_holds_no_date_or_version(svg):
    assert svg_stamps(svg.read_text()) == []


def test_save_writes_no_date_or_version(tmp_path):
    """What ex.save writes now, not only what was committed: the check above on a fresh figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    png, svg = common.save(fig, "probe", tmp_path)
    plt.close(fig)
    assert png_text_chunks(png.read_bytes()) == []
    assert svg_stamps(svg.read_text()) == []


# That a replay draws the same bytes every time: tests/test_notebooks.py checks every notebook's
# replay against the committed figures, byte for byte.
