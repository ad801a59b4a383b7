"""Device placement without a GPU: every model and search runs on a simulated accelerator that
raises on any CPU/device mix, with results identical to the CPU's (see simulated_device.py)."""

import copy

import pytest
import torch
import torch.nn.functional as F
from simulated_device import DeviceMismatch, simulated_device

from nmt.config import DecodeConfig, RNNConfig, Strategy, TransformerConfig
from nmt.data.batches import collate
from nmt.models import build_model
from nmt.tokenizer import EOS, PAD
from nmt.translation.search import decode_all

V = 31
CPU = torch.device("cpu")
FAMILIES = {
    "gru-bahdanau": RNNConfig(emb_size=16, hidden_size=16, dropout=0.0),
    "lstm-luong-feed": RNNConfig(
        emb_size=16, hidden_size=16, dropout=0.0, cell="lstm", decoder="luong",
        attention="general", decoder_layers=2, encoder_layers=2,
    ),
    "gru-luong-multihead": RNNConfig(
        emb_size=16, hidden_size=16, dropout=0.0, decoder="luong", input_feeding=False,
        attention="multihead", heads=4, tie_embeddings=True,
    ),
    "transformer-pre-sinusoidal": TransformerConfig(
        d_model=16, heads=4, ff_size=32, encoder_layers=2, decoder_layers=2, dropout=0.0
    ),
    "transformer-post-learned": TransformerConfig(
        d_model=16, heads=4, ff_size=32, encoder_layers=1, decoder_layers=2, dropout=0.0,
        norm="post", positions="learned", max_positions=8,
    ),
}  # fmt: skip
DECODINGS = {
    "greedy": DecodeConfig(batch_size=4),
    "beam": DecodeConfig(strategy=Strategy.beam, beam_size=3, n_best=2, batch_size=4),
    "sample": DecodeConfig(strategy=Strategy.sample, n_best=2, top_k=5, batch_size=4),
    "greedy-constrained": DecodeConfig(min_len_b=3, no_repeat_ngram=2, batch_size=4),
}


def model_and_sources(family: str) -> tuple[torch.nn.Module, list[list[int]]]:
    torch.manual_seed(0)
    model = build_model(FAMILIES[family], V, V, shared_vocab=True).eval()
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 12, (7,), generator=g).tolist()
    sources = [torch.randint(4, V, (n,), generator=g).tolist() + [EOS] for n in lengths]
    return model, sources


def flatten(nbests) -> tuple[list, list]:
    """(tokens, ended) of every hypothesis, compared exactly; their scores, compared to 1e-4 (a
    rounded score can flip at a rounding boundary on a last-bit difference)."""
    hyps = [h for nbest in nbests for h in nbest]
    return [(h.tokens, h.ended) for h in hyps], [h.score for h in hyps]


@pytest.mark.parametrize("decoding", DECODINGS)
@pytest.mark.parametrize("family", FAMILIES)
def test_search_on_a_device_matches_the_cpu(family, decoding):
    model, sources = model_and_sources(family)
    cfg = DECODINGS[decoding]
    expected = decode_all(model, sources, cfg, CPU, attention=True)
    with simulated_device() as sim:
        on_device = copy.deepcopy(model).to(sim.device)
        got = decode_all(on_device, sources, cfg, sim.device, attention=True)
    (got_tokens, got_scores), (tokens, scores) = flatten(got), flatten(expected)
    assert got_tokens == tokens
    assert got_scores == pytest.approx(scores, abs=1e-4)
    assert all(h.attention.device == CPU for hyps in got for h in hyps)  # maps come back


@pytest.mark.parametrize("family", FAMILIES)
def test_a_training_step_on_a_device_matches_the_cpu(family):
    model, sources = model_and_sources(family)
    targets = [s[:-1][::-1] for s in sources]
    batch = collate(list(range(len(sources))), sources, targets)

    def step(device: torch.device) -> tuple[float, torch.Tensor, torch.Tensor]:
        torch.manual_seed(3)  # the same dropout masks (attention dropout is on)
        m = copy.deepcopy(model).train().to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        b = batch.to(device)
        logits, _ = m(b.src, b.src_lens, b.tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1), b.tgt_out.flatten(), ignore_index=PAD)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        grads = torch.cat([p.grad.flatten() for p in m.parameters()]).to("cpu")
        opt.step()
        return loss.item(), grads, torch.cat([p.detach().flatten() for p in m.parameters()]).cpu()

    cpu_loss, cpu_grads, cpu_weights = step(CPU)
    with simulated_device() as sim:
        dev_loss, dev_grads, dev_weights = step(sim.device)
    # some ops take other kernels for accelerator tensors (foreach clipping, fused RNN paths):
    # equal up to rounding
    assert dev_loss == pytest.approx(cpu_loss, rel=1e-6)
    torch.testing.assert_close(dev_grads, cpu_grads, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(dev_weights, cpu_weights, rtol=1e-4, atol=1e-6)


def test_the_simulation_catches_a_cpu_tensor_indexed_by_a_device_index():
    """The bug of issue 7: search built its length limits on the CPU (from src_lens) and indexed
    them with device indices. Reintroduced here, the simulation stops it at once."""
    with simulated_device() as sim:
        alive = torch.arange(3, device=sim.device)
        limits_on_cpu = torch.tensor([5, 6, 7])
        with pytest.raises(DeviceMismatch, match="aten.index"):
            limits_on_cpu[alive]
        with pytest.raises(DeviceMismatch):
            alive + limits_on_cpu
        assert int((alive + torch.tensor(1)).sum()) == 6  # 0-dim CPU tensors mix, as on CUDA
        assert sim.syncs == 1


def test_search_with_limits_built_on_the_cpu_fails_under_the_simulation(monkeypatch):
    """Put the old `_limits` back (tensors on src_lens' device, the CPU): every strategy fails."""
    import nmt.translation.search.batch

    def old_limits(cfg, src, src_lens):
        lens = src_lens.tolist()
        return (
            torch.tensor([cfg.max_len(n) for n in lens], device=src_lens.device),
            torch.tensor([cfg.min_len(n) for n in lens], device=src_lens.device),
        )

    monkeypatch.setattr(nmt.translation.search.batch, "_limits", old_limits)
    model, sources = model_and_sources("gru-bahdanau")
    for cfg in DECODINGS.values():
        decode_all(model, sources, cfg, CPU)  # fine on the CPU, which is why CI never saw it
        with simulated_device() as sim, pytest.raises(DeviceMismatch):
            decode_all(copy.deepcopy(model).to(sim.device), sources, cfg, sim.device)
