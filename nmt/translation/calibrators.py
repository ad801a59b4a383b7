"""The maps a confidence is fitted with (`nmt.translation.confidence`), and the measures that judge
them: least squares (a score's predictor), the logistic map (Platt scaling), isotonic regression
(pool adjacent violators), the expected calibration error and Spearman's rho.

    knots, values = isotonic(log_probs, right)       # on the validation split
    isotonic_at(knots, values, -0.3)                  # a probability
"""

from __future__ import annotations

import bisect
import math

import torch

BINS = 10  # of the expected calibration errors


def least_squares(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, float]:
    """w, b minimising |x w + b - y|^2 (x (N, F), y (N,)), with a little ridge so that a constant
    feature (every source of one length, no lexicon) does not make it singular."""
    design = torch.cat([x.double(), torch.ones(x.size(0), 1, dtype=torch.double)], 1)
    ridge = 1e-3 * torch.eye(design.size(1), dtype=torch.double)
    solution = torch.linalg.solve(design.T @ design + ridge, design.T @ y.double())
    return solution[:-1].float(), float(solution[-1])


def logistic(x: torch.Tensor, y: torch.Tensor, steps: int = 50) -> tuple[float, float]:
    """a, b of P(y=1 | x) = sigmoid(a x + b), by Newton's method on the log-likelihood (a small
    ridge keeps it finite when the classes separate)."""
    a, b = 0.1, 0.0
    x, y = x.double(), y.double()
    for _ in range(steps):
        p = torch.sigmoid(a * x + b)
        w = p * (1 - p)
        grad = torch.stack([((p - y) * x).sum() + 1e-3 * a, (p - y).sum()])
        xw = float((w * x).sum())
        hess = torch.tensor(
            [[float((w * x * x).sum()) + 1e-3, xw], [xw, float(w.sum()) + 1e-9]], dtype=torch.double
        )
        step = torch.linalg.solve(hess, grad)
        a, b = a - float(step[0]), b - float(step[1])
        if float(step.abs().max()) < 1e-8:
            break
    return a, b


def isotonic(x: torch.Tensor, y: torch.Tensor, least: int = 20) -> tuple[list[float], list[float]]:
    """The non-decreasing step function of x that fits y (0 or 1) best in squares: pool adjacent
    violators over x sorted, each block at least `least` items (so that a probability rests on
    that many labels). Returns each block's largest x (`knots`, ascending) and its mean y."""
    order = torch.argsort(x, stable=True)
    xs, ys = x[order].tolist(), y[order].double().tolist()
    blocks: list[list[float]] = []  # [sum of y, count, largest x]
    for xi, yi in zip(xs, ys):
        blocks.append([yi, 1.0, xi])
        while len(blocks) > 1 and (
            blocks[-2][0] / blocks[-2][1] >= blocks[-1][0] / blocks[-1][1] or blocks[-2][1] < least
        ):
            total, count, _ = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
            blocks[-1][2] = xi
    if len(blocks) > 1 and blocks[-1][1] < least:  # the last block, too small, joins the one before
        total, count, last = blocks.pop()
        blocks[-1] = [blocks[-1][0] + total, blocks[-1][1] + count, last]
    return [b[2] for b in blocks], [b[0] / b[1] for b in blocks]


def isotonic_at(knots: list[float], values: list[float], x: float) -> float:
    """The fitted step function at x: the value of the first block whose largest x is >= x (the
    last block's beyond them)."""
    return values[min(bisect.bisect_left(knots, x), len(values) - 1)]


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def expected_calibration_error(confidence: torch.Tensor, correct: torch.Tensor) -> float:
    """ECE over BINS equal-width bins: the mean |accuracy - confidence| of each bin, weighted by
    its share of the items."""
    if confidence.numel() == 0:
        return 0.0
    bins = (confidence.clamp(0, 1 - 1e-9) * BINS).long()
    error = 0.0
    for b in range(BINS):
        inside = bins == b
        if inside.any():
            gap = (correct[inside].float().mean() - confidence[inside].float().mean()).abs()
            error += float(gap) * float(inside.float().mean())
    return error


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation (ties share their mean rank)."""
    if len(x) < 2:
        return 0.0
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = float(rx.norm() * ry.norm())
    return float((rx * ry).sum()) / denominator if denominator else 0.0


def _ranks(values: list[float]) -> torch.Tensor:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = torch.empty(len(values), dtype=torch.double)
    k = 0
    while k < len(order):
        j = k
        while j + 1 < len(order) and values[order[j + 1]] == values[order[k]]:
            j += 1
        for m in range(k, j + 1):
            ranks[order[m]] = (k + j) / 2
        k = j + 1
    return ranks
