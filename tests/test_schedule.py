"""LR schedule: warm-up, plateau reductions with a floor, Noam decay, state round trip."""

import pytest
import torch

from nmt.config import TrainConfig
from nmt.training.schedule import LRSchedule


def schedule(**kw) -> LRSchedule:
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    return LRSchedule(TrainConfig(**kw), opt)


def test_linear_warmup_then_constant():
    s = schedule(lr=1e-3, warmup_steps=10, scheduler="constant")
    assert s.lr_at(1) == pytest.approx(1e-4)
    assert s.lr_at(5) == pytest.approx(5e-4)
    assert s.lr_at(10) == s.lr_at(1000) == pytest.approx(1e-3)
    s.report(improved=False)
    s.report(improved=False)
    assert s.lr_at(1000) == pytest.approx(1e-3)  # constant ignores validation


def test_plateau_halves_after_patience_and_stops_at_min_lr():
    s = schedule(lr=1e-3, scheduler="plateau", plateau_patience=2, plateau_factor=0.5, min_lr=2e-4)
    s.report(False)
    assert s.set_step(1) == pytest.approx(1e-3)
    assert s.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)
    s.report(False)
    assert s.lr_at(1) == pytest.approx(5e-4)
    s.report(True)  # an improvement resets the count
    s.report(False)
    assert s.lr_at(1) == pytest.approx(5e-4)
    for _ in range(10):
        s.report(False)
    assert s.lr_at(1) == pytest.approx(2e-4)


def test_noam_peaks_at_the_end_of_warmup_and_decays_as_inverse_sqrt():
    s = schedule(lr=1e-3, scheduler="noam", warmup_steps=100)
    assert s.lr_at(50) == pytest.approx(5e-4)
    assert s.lr_at(100) == pytest.approx(1e-3)
    assert s.lr_at(400) == pytest.approx(5e-4)


def test_state_round_trip():
    s = schedule(scheduler="plateau", plateau_patience=1)
    s.report(False)
    t = schedule(scheduler="plateau", plateau_patience=1)
    t.load_state_dict(s.state_dict())
    assert t.lr_at(1) == s.lr_at(1) and t.bad == s.bad


@pytest.mark.parametrize("kind", ["linear", "cosine"])
def test_decays_reach_min_lr_when_the_budget_is_spent(kind):
    s = schedule(lr=1e-3, min_lr=1e-5, scheduler=kind, warmup_steps=10)
    assert s.lr_at(5, 0.0) == pytest.approx(5e-4)  # warm-up first
    assert s.lr_at(10, 0.0) == pytest.approx(1e-3)
    assert s.lr_at(10, 0.5) == pytest.approx((1e-3 + 1e-5) / 2)  # both are halfway at 0.5
    assert s.lr_at(10, 1.0) == s.lr_at(10, 7.0) == pytest.approx(1e-5)
    lrs = [s.lr_at(10, x / 10) for x in range(11)]
    assert lrs == sorted(lrs, reverse=True)
    if kind == "cosine":  # slow at first, fast in the middle
        assert lrs[0] - lrs[1] < lrs[5] - lrs[6]
    s.report(False)
    s.report(False)
    s.report(False)
    assert s.lr_at(10, 0.0) == pytest.approx(1e-3)  # validation does not move a decay
