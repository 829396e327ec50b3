"""O(1) vectorized sampling from many small discrete distributions (Walker/Vose alias tables)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _vose(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Alias table of one distribution ``p`` (non-negative, sums to > 0)."""
    k = len(p)
    scaled = p / p.sum() * k
    prob = np.zeros(k)
    alias = np.arange(k, dtype=np.int64)
    small = [i for i in range(k) if scaled[i] < 1.0]
    large = [i for i in range(k) if scaled[i] >= 1.0]
    while small and large:
        s, g = small.pop(), large.pop()
        prob[s], alias[s] = scaled[s], g
        scaled[g] -= 1.0 - scaled[s]
        (small if scaled[g] < 1.0 else large).append(g)
    for i in large + small:  # numerical leftovers are (almost exactly) 1
        prob[i] = 1.0 if p[i] > 0 else 0.0
    return prob, alias


@dataclass(frozen=True, eq=False)
class AliasTable:
    """One alias table per row of a (rows, k) weight matrix; ``sample`` draws a column per request."""

    prob: np.ndarray  # (rows * k,)
    alias: np.ndarray  # (rows * k,) column index
    k: int

    @classmethod
    def build(cls, weights: np.ndarray) -> AliasTable:
        w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
        tables = [_vose(row) for row in w]
        return cls(np.concatenate([t[0] for t in tables]), np.concatenate([t[1] for t in tables]), w.shape[1])

    def sample(self, rng: np.random.Generator, rows: np.ndarray | int, n: int) -> np.ndarray:
        """A column index for each of ``n`` draws from row(s) ``rows`` (array of length n, or one row)."""
        j = (rng.random(n) * self.k).astype(np.int64)
        flat = np.asarray(rows, dtype=np.int64) * self.k + j
        keep = rng.random(n) < self.prob[flat]
        return np.where(keep, j, self.alias[flat])
