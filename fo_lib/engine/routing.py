"""All-to-All routing: where every output row of every rank goes."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Routing:
    """All-to-All routing of every rank: ``dest[s][i]`` is where output row ``i`` of rank ``s`` goes,
    ``dst_index[s][i]`` the row it fills there."""

    dest: tuple
    dst_index: tuple

    @classmethod
    def from_destinations(cls, dest, *, shuffle_seed: int | None = None) -> "Routing":
        """Routing whose receive slots follow (source rank, row) order, optionally shuffled."""
        dest = tuple(np.asarray(d, dtype=np.int64) for d in dest)
        W = len(dest)
        counters = np.zeros(W, dtype=np.int64)
        idx = []
        for d in dest:
            x = np.empty(len(d), dtype=np.int64)
            for q in range(W):
                m = d == q
                x[m] = counters[q] + np.arange(int(m.sum()))
                counters[q] += int(m.sum())
            idx.append(x)
        if shuffle_seed is not None:  # each receiver's slots in a random order
            rng = np.random.default_rng(shuffle_seed)
            perms = [rng.permutation(int(c)) for c in counters]
            idx = [np.array([perms[q][j] for q, j in zip(d, x)], dtype=np.int64) for d, x in zip(dest, idx)]
        return cls(dest, tuple(idx))

    def digest(self) -> str:
        """A short hash of every rank's destinations and slots: equal routings, equal digests."""
        h = hashlib.sha256()
        for arrays in (self.dest, self.dst_index):
            for a in arrays:
                a = np.ascontiguousarray(a, dtype=np.int64)
                h.update(len(a).to_bytes(8, "little"))
                h.update(a.tobytes())
        return h.hexdigest()[:16]
