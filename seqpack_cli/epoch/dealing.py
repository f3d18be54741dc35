"""How an epoch's stream of bins is dealt to ranks, step by step: strided, or balanced by cost.

A step is `world_size x rows_per_rank` bins: every rank trains on `rows_per_rank` of them at
once, and waits for the slowest rank before the next step. Both deals give every rank the same
number of steps and deal each stream index (`seqpack_cli.epoch.cursor`) once; when the steps
need more bins than the stream holds, the missing ones (fewer than a step) are repeats
(`drop_last=True` drops the stream's tail instead). They work on stream indices; the plan maps
those to bins.

- `StridedDeal` (balance=None): rank r takes stream indices r, r + W, r + 2W, ... exactly as
  `DistributedSampler`; step s of rank r is its bins s*B .. s*B + B - 1. Its repeats are the
  stream's first bins (indices past the end wrap around to its start), as `DistributedSampler`
  pads.
- `BalancedDeal` (balance="cost"): a bin costs the sum over its sequences of `c*l + l**2`
  (linear layers plus attention), and a rank's step costs the sum of its bins, so a step lasts as
  long as its most expensive rank. The stream is cut into windows of `window` steps
  (`window*W*B` consecutive stream indices; the last window also takes the steps left over);
  each window's bins are sorted by cost (descending,
  ties in stream order) and cut into steps, so a step holds bins of nearly equal cost; each step's
  bins are dealt longest-processing-time first, round by round (every rank gets one bin per round,
  the costliest bin of the round to the least-loaded rank), so each rank gets exactly B bins;
  the steps of a window are then played in a seeded shuffled order, so the epoch does not run
  from expensive to cheap steps within a window. Its repeats come from the epoch's last window,
  the one they pad, next to bins of their cost: sorted by cost, that window's bins end in a short
  step of r < W*B bins; steps are cut from the top down to some step m and from the bottom up
  below it, so step m holds the W*B bins around the cut, W*B - r of them repeats of bins of the
  step above (never a bin twice in one step), and m is the cut whose worst step is the least. A
  last window of one short step (`window=1`) repeats the stream's first bins. (Repeats of the
  stream's first bins, as `StridedDeal` pads, cost what the first window costs: without a seed,
  the canonical order's costliest bins, which made the slowest rank of the last window's
  costliest step.) A larger window balances better (its steps' costs are closer
  together) and mixes the step order less; `DEFAULT_BALANCE_WINDOW` is the measured default
  (`benchmarks/bench_balance.py`). Any step costs O(window * W * B) to compute, with no state
  carried from step to step; the last window computed is kept, so iterating costs O(W * B) per
  step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from seqpack_cli.seeding import mix64, seed_from_components

__all__ = ["DEFAULT_BALANCE_WINDOW", "BalancedDeal", "StridedDeal"]

DEFAULT_BALANCE_WINDOW = 256
"""Steps per balancing window (see the module docstring and benchmarks/bench_balance.py)."""

# Seed components of a window's step order: (epoch seed, _ORDER_COMPONENT, window). Three
# components never collide with the plan's (seed, 0) bin order or (seed, length) pool seeds.
_ORDER_COMPONENT = 0
# Windows computed together: enough stream indices per numpy call to amortise its overhead.
_WINDOW_INDICES = 1 << 16


class StridedDeal:
    """balance=None: the stream dealt as torch's `DistributedSampler` deals a dataset."""

    def __init__(
        self, stream_len: int, rank: int, world_size: int, rows_per_rank: int, drop_last: bool
    ) -> None:
        self.rank, self.world_size, self.rows_per_rank = rank, world_size, rows_per_rank
        if drop_last:
            self.num_bins = stream_len // world_size
        else:
            self.num_bins = -(-stream_len // world_size)
        self.num_steps = -(-self.num_bins // rows_per_rank)

    def rank_indices(self, first: int, last: int, out: np.ndarray) -> np.ndarray:
        """The stream indices of this rank's bins first..last-1, written into `out` (int64)."""
        out[:] = np.arange(first, last, dtype=np.int64)
        if self.world_size > 1:
            out *= self.world_size
            out += self.rank
        return out

    def steps(self, first: int, last: int) -> np.ndarray:
        """The stream indices of steps first..last-1, `[steps, world_size, rows_per_rank]`, -1
        where a rank has no bin (only in the last step, when B does not divide its bins)."""
        world, rows = self.world_size, self.rows_per_rank
        step = np.arange(first, last, dtype=np.int64)[:, None, None]
        k = step * rows + np.arange(rows, dtype=np.int64)[None, None, :]  # bin of each rank
        u = k * world + np.arange(world, dtype=np.int64)[None, :, None]
        return np.where(k < self.num_bins, u, -1)

    def consumed_after(self, steps: int) -> tuple[int, np.ndarray | None]:
        """(stream indices dealt, None) after `steps` steps: a prefix of the stream."""
        return min(steps * self.rows_per_rank, self.num_bins) * self.world_size, None


class BalancedDeal:
    """balance="cost": each step's bins dealt so that the ranks' costs are equal (see the module
    docstring). `template_of(u)` is the template of the bins at stream indices `u`, an index
    into `template_costs` (each template's cost, float64); it may overwrite `u`."""

    def __init__(
        self,
        stream_len: int,
        rank: int,
        world_size: int,
        rows_per_rank: int,
        window: int,
        drop_last: bool,
        seed: int | None,
        template_of: Callable[[np.ndarray], np.ndarray],
        template_costs: np.ndarray,
    ) -> None:
        self.rank, self.world_size, self.rows_per_rank = rank, world_size, rows_per_rank
        self.window, self.seed, self._template_of = window, seed, template_of
        self._template_costs = template_costs
        self._sort_keys = _sort_keys(template_costs)
        self.step_bins = world_size * rows_per_rank
        self.window_bins = window * self.step_bins
        if drop_last:
            self.num_steps = stream_len // self.step_bins
        else:
            self.num_steps = -(-stream_len // self.step_bins)
        self.num_bins = self.num_steps * rows_per_rank
        # Windows of `window` steps; the epoch's last window also takes the steps left over
        # (window to 2*window - 1 steps): a short last window would have too few steps of
        # each cost to balance them.
        self.num_windows = max(1, self.num_steps // window) if self.num_steps else 0
        self._stream_len = stream_len
        self._cache: tuple[int, int, np.ndarray] | None = None  # (first window, last, deals)

    def rank_indices(self, first: int, last: int, out: np.ndarray) -> np.ndarray:
        """The stream indices of this rank's bins first..last-1, written into `out` (int64)."""
        k = np.arange(first, last, dtype=np.int64)
        step, row = np.divmod(k, self.rows_per_rank)
        window = np.minimum(step // self.window, self.num_windows - 1)
        bounds = np.searchsorted(window, np.arange(int(window[0]), int(window[-1]) + 2))
        per_call = max(1, _WINDOW_INDICES // self.window_bins)
        for i in range(0, len(bounds) - 1, per_call):
            a, b = int(bounds[i]), int(bounds[min(i + per_call, len(bounds) - 1)])
            w0 = int(window[a])
            deals = self._deals(w0, int(window[b - 1]) + 1)
            out[a:b] = deals[step[a:b] - self._first_step(w0), self.rank, row[a:b]]
        return out

    def steps(self, first: int, last: int) -> np.ndarray:
        """The stream indices of steps first..last-1, `[steps, world_size, rows_per_rank]`."""
        if first >= last:
            return np.empty((0, self.world_size, self.rows_per_rank), dtype=np.int64)
        w0, w1 = self._window_of(first), self._window_of(last - 1) + 1
        deals = self._deals(w0, w1)
        return deals[first - self._first_step(w0) : last - self._first_step(w0)]

    def consumed_after(self, steps: int) -> tuple[int, np.ndarray | None]:
        """(stream indices covered, those of them not dealt yet) after `steps` steps: the
        windows before the current one, and the current window less its steps played. After
        the last step: all but a tail `drop_last` dropped."""
        if steps >= self.num_steps:
            return min(self.num_steps * self.step_bins, self._stream_len), None
        window = self._window_of(steps)
        first = self._first_step(window)
        if steps == first:
            return first * self.step_bins, None
        deals = self._deals(window, window + 1)
        # The window's stream indices end where its steps end (a last window dropping its tail
        # leaves that tail in the stream), or at the stream's end (one padding its last step).
        end = min((first + len(deals)) * self.step_bins, self._stream_len)
        # Not dealt yet: the window's indices no step played (a repeat played counts its bin
        # as dealt; a repeat not played yet is no bin left to deal).
        played = deals[: steps - first].ravel()
        return end, np.setdiff1d(np.arange(first * self.step_bins, end), played)

    def _window_of(self, step: int) -> int:
        return min(step // self.window, self.num_windows - 1)

    def _first_step(self, window: int) -> int:
        """The first step of `window` (`num_steps` for the window after the last)."""
        return self.num_steps if window >= self.num_windows else window * self.window

    def _deals(self, w0: int, w1: int) -> np.ndarray:
        """The deals of windows w0..w1-1: `[steps, world_size, rows_per_rank]` stream indices,
        steps w0*window .. on, in the order they are played."""
        cached = self._cache
        if cached is not None and cached[0] <= w0 and w1 <= cached[1]:
            offset = self._first_step(cached[0])
            return cached[2][self._first_step(w0) - offset : self._first_step(w1) - offset]
        full_end = min(w1, self.num_windows - 1)  # windows of `window` steps
        parts = []
        if w0 < full_end:
            parts.append(self._deal_windows(w0, full_end, self.window))
        if full_end < w1:  # the epoch's last window, with the steps left over
            last_steps = self.num_steps - self._first_step(full_end)
            parts.append(self._deal_windows(full_end, w1, last_steps))
        deals = parts[0] if len(parts) == 1 else np.concatenate(parts)
        self._cache = (w0, w1, deals)
        return deals

    def _deal_windows(self, w0: int, w1: int, steps: int) -> np.ndarray:
        """Deal windows w0..w1-1, each of `steps` steps (full ones, or the last one alone)."""
        num_windows, width = w1 - w0, steps * self.step_bins
        start = w0 * self.window_bins
        # Only the epoch's last window (dealt alone) can hold fewer bins than slots.
        missing = max(0, start + num_windows * width - self._stream_len)
        flat = np.arange(start, start + num_windows * width - missing, dtype=np.int64)
        if missing and len(flat) < self.step_bins:
            # A last window of one short step (windows of 1 step, or a one-step epoch): the
            # stream's first bins repeat, as StridedDeal pads (its own, a one-step epoch's).
            flat = np.concatenate((flat, np.arange(missing, dtype=np.int64) % self._stream_len))
            missing = 0
        t = self._template_of(flat.copy()).reshape(num_windows, -1)
        by_cost = np.argsort(self._sort_keys.take(t), axis=1, kind="stable")
        u = np.take_along_axis(flat.reshape(num_windows, -1), by_cost, axis=1)
        cost = self._template_costs.take(np.take_along_axis(t, by_cost, axis=1))
        del flat, t, by_cost  # freed before the deal's own arrays
        rows = num_windows * steps
        if missing:
            deal = self._deal_padded(u[0], cost[0], missing)
        else:
            deal, _ = self._lpt(u.reshape(rows, self.step_bins), cost.reshape(rows, self.step_bins))
        deal = deal.reshape(num_windows, steps, self.world_size, self.rows_per_rank)
        if self.seed is not None and steps > 1:
            salts = [seed_from_components(self.seed, _ORDER_COMPONENT, w) for w in range(w0, w1)]
            keys = np.arange(steps, dtype=np.uint64)[None, :] ^ np.array(salts, np.uint64)[:, None]
            order = np.argsort(mix64(keys), axis=1, kind="stable")
            deal = np.take_along_axis(deal, order[:, :, None, None], axis=1)
        return deal.reshape(num_windows * steps, self.world_size, self.rows_per_rank)

    def _deal_padded(self, u: np.ndarray, cost: np.ndarray, missing: int) -> np.ndarray:
        """The epoch's last window dealt with `missing` repeats: its bins `u`, sorted by `cost`
        (descending), end in a short step of `short = W*B - missing` bins. Cut from the top
        (`head`: steps of bins [s*W*B, (s+1)*W*B)) or from `short` on (`tail`: [short + s*W*B,
        ...)), the bins make the same steps but for where the short one sits. The deal takes the
        head's steps 0..m-1 and the tail's m-1..: the tail's step m-1 holds the short step's
        cost neighbours, repeats of `missing` bins of the head's step m-1 among them (never one
        bin twice in a step). m (1 to the head's steps) is the one whose worst step is the
        least, the largest on a tie. `[steps, W, B]`."""
        size = self.step_bins
        full = len(u) // size  # >= 1: a window of one short step is padded by _deal_windows
        short = len(u) - full * size
        cut = full * size
        head, head_loads = self._lpt(u[:cut].reshape(full, size), cost[:cut].reshape(full, size))
        tail, tail_loads = self._lpt(
            u[short:].reshape(full, size), cost[short:].reshape(full, size)
        )
        # The worst step of each m in 1..full: the head's steps before m, the tail's from m - 1.
        head_worst = np.maximum.accumulate(_step_ratios(head_loads))
        tail_worst = np.maximum.accumulate(_step_ratios(tail_loads)[::-1])[::-1]
        worst = np.maximum(head_worst, tail_worst)
        m = full - int(np.argmin(worst[::-1]))  # the largest m of the least worst step
        return np.concatenate((head[:m], tail[m - 1 :]))

    def _lpt(self, u: np.ndarray, cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each row's bins (sorted by cost, descending) dealt to the ranks round by round: round
        b gives bins b*W .. b*W + W - 1 to the ranks from the least loaded up (ties: lower rank
        first), so every rank gets exactly one bin per round. `[rows, W, B]`, and the ranks'
        loads `[rows, W]`."""
        world, rounds = self.world_size, self.rows_per_rank
        if rounds == 1:
            return u.reshape(len(u), world, 1), cost
        deal = np.empty((len(u), world, rounds), dtype=np.int64)
        loads = np.zeros((len(u), world))
        rows = np.arange(len(u))[:, None]
        ranks = np.broadcast_to(np.arange(world), loads.shape)  # round 0: every load is 0
        for b in range(rounds):
            if b:
                ranks = np.argsort(loads, axis=1, kind="stable")
            deal[rows, ranks, b] = u[:, b * world : (b + 1) * world]
            loads[rows, ranks] += cost[:, b * world : (b + 1) * world]
        return deal, loads


def _step_ratios(loads: np.ndarray) -> np.ndarray:
    """Each step's slowest rank over its total (its max/mean, over W): `loads` `[steps, W]`.
    Summed rank by rank, elementwise, so every rank computes the very same floats."""
    total = loads[:, 0].copy()
    for rank in range(1, loads.shape[1]):
        total += loads[:, rank]
    return loads.max(axis=1) / total


def _sort_keys(template_costs: np.ndarray) -> np.ndarray:
    """Each template's rank by cost, descending, equal costs the same rank: a stable sort of the
    keys is the stable sort of the costs, descending. Of at most 65,536 ranks, uint16, which
    numpy sorts by radix (~9x the float sort of a window of 26,000 bins)."""
    distinct = np.unique(-template_costs)
    keys = np.searchsorted(distinct, -template_costs)
    return keys.astype(np.uint16 if len(distinct) <= 1 << 16 else np.int64)
