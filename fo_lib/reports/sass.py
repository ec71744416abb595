"""The portable GEMM's k-loop in ``nvdisasm`` output, and its hot path.

The k-loop is the innermost backward branch around the HMMAs; its hot path is every instruction of
the loop except the block only taken once per tile (the load cursor's move to the next tile). Two
instantiations' hot paths compare as opcode sequences (:func:`similarity`, 1.000: the same
schedule). ``scripts/profile/sass_report.py`` compiles the kernels and prints these per epilogue;
docs/decisions.md, "An epilogue change is judged by its k-loop's SASS first".
"""
from __future__ import annotations

import collections
import difflib
import re

_INSTR = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]+\s+)?([A-Z0-9_]+(?:\.[A-Z0-9_]+)*)")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_BRANCH = re.compile(r"BRA `\((\.L_x_\d+)\)")


def k_loop(sass: str, mma: str = "HMMA") -> list[str]:
    """The lines of the shortest backward-branch loop that holds ``mma`` instructions (the k-loop;
    ``HGMMA``: the Hopper kernel's consumers)."""
    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := _LABEL.match(line))}
    best = None
    for i, line in enumerate(lines):
        m = _BRANCH.search(line)
        if m and labels.get(m.group(1), i) < i:
            body = lines[labels[m.group(1)]:i + 1]
            if any(mma in b for b in body) and (best is None or len(body) < len(best)):
                best = body
    if best is None:
        raise ValueError(f"no loop with {mma} instructions in this SASS")
    return best


def instruction_count(lines: list[str]) -> int:
    """How many of ``lines`` are instructions (labels and other lines left out)."""
    return sum(1 for line in lines if _INSTR.match(line))


def opcodes(lines: list[str]) -> collections.Counter:
    """Opcode counts (without modifiers) of every instruction in ``lines`` (a Hopper k-loop's whole
    body: its MMAs may sit in a block a branch skips, which :func:`hot_sequence` would leave out)."""
    return collections.Counter(m.group(1).split(".")[0] for line in lines if (m := _INSTR.match(line)))


def hot_sequence(loop: list[str]) -> list[str]:
    """The loop's opcodes (with their modifiers, e.g. ``IADD3.X``) in order, without its once-per-tile
    block: the block after the forward
    branch that skips the most instructions (the load cursor's move to the next tile)."""
    labels = {m.group(1): i for i, line in enumerate(loop) if (m := _LABEL.match(line))}
    skips = [(labels[m.group(1)] - i, i, labels[m.group(1)]) for i, line in enumerate(loop)
             if (m := _BRANCH.search(line)) and labels.get(m.group(1), -1) > i]
    cold = set()
    if skips:
        end = max(skips)[2]
        # The rare block: from the first branch that jumps to that label, to the label.
        first = min(i for _, i, e in skips if e == end)
        cold = set(range(first + 1, end))
    return [m.group(1) for i, line in enumerate(loop) if i not in cold and (m := _INSTR.match(line))]


def hot_path(loop: list[str]) -> collections.Counter:
    """Opcode counts (without modifiers: ``HMMA``, ``LDSM``) of the loop's hot path (:func:`hot_sequence`)."""
    return collections.Counter(op.split(".")[0] for op in hot_sequence(loop))


def similarity(a: list[str], b: list[str]) -> float:
    """How alike two opcode sequences are, 0 to 1 (difflib's ratio: twice the matched opcodes over
    both lengths): 1 is the same schedule of the same instructions. The same instructions in
    another order score lower, which is how two instantiations' loops are told apart."""
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
