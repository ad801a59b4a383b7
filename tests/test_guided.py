"""Guided alignment (nmt/training/guided.py): the aligner's links symmetrised as Koehn's
grow-diag-final-and, their targets laid out where the batch has the pieces, a Transformer's taught
layer the same weights as its decoding steps', a trained model's attention closer to the links than
the same run's without, the head read back when translating, and every refusal before any work."""

import dataclasses

import eflomal
import numpy as np
import pytest
import torch
from conftest import SMALL, SMALL_MODELS

from nmt.checkpoint import load_checkpoint
from nmt.cli import main as cli
from nmt.config import GuidedAlignmentConfig, TransformerConfig
from nmt.data.batches import collate
from nmt.documents.alignment import Reading, reading_of
from nmt.errors import NMTError
from nmt.models import build_model
from nmt.tokenizer import EOS
from nmt.training import guided
from nmt.training.guided import Guide, Links, corpus_links, symmetrise
from nmt.training.setup import prepare_run
from nmt.translation.translator import Translator


def test_grow_diag_final_and_keeps_the_agreement_and_grows_it_by_neighbours():
    forward = {(0, 0), (1, 1), (2, 3), (3, 2)}
    backward = {(0, 0), (1, 1), (1, 2), (3, 3), (4, 4)}
    # agreed: 0-0, 1-1; grown from the union: 1-2 (beside 1-1, target 2 unaligned), 2-3 (beside
    # 1-2), 3-3 (beside 2-3), 4-4 (diagonal to 3-3); 3-2 joins two words aligned by then: left out
    assert symmetrise(forward, backward) == [(0, 0), (1, 1), (1, 2), (2, 3), (3, 3), (4, 4)]
    assert symmetrise(set(), set()) == []
    assert symmetrise({(0, 1)}, set()) == [(0, 1)]  # final-and: a link of two unaligned words
    assert symmetrise({(0, 0), (2, 2)}, {(0, 0)}) == [(0, 0), (2, 2)]


def test_the_targets_spread_each_positions_links_past_the_prefixes_and_end_with_eos():
    links = Links(
        np.array([0, 3, 4]), np.array([0, 1, 1, 0], np.int32), np.array([0, 0, 1, 2], np.int32)
    )
    # two pairs; sources of 3 and 1 pieces before EOS, one code before each source and target
    code = 7
    batch = collate(
        [0, 1], [[code, 4, 5, 6, EOS], [code, 4, EOS]], [[code, 8, 9, 10], [code, 8, 9, 10]]
    )
    targets = Guide(links, GuidedAlignmentConfig(weight=1.0), (1, 1)).targets(batch)
    assert targets.shape == (2, 5, 5)  # (B, T, S): T = 4 target pieces + EOS
    expected = torch.zeros(2, 5, 5)
    expected[0, 1, 1] = expected[0, 1, 2] = 0.5  # target 0 links sources 0 and 1
    expected[0, 2, 2] = 1.0
    expected[0, 4, 4] = 1.0  # EOS to EOS
    expected[1, 3, 1] = 1.0  # the second pair's target 2 to its source 0
    expected[1, 4, 2] = 1.0
    torch.testing.assert_close(targets, expected)


def test_a_transformers_taught_layer_has_the_weights_its_decoding_steps_have():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, heads=4, ff_size=32, encoder_layers=2, decoder_layers=3)
    model = build_model(cfg, 29, 29, shared_vocab=True).eval()
    batch = collate([0, 1], [[5, 6, 7, EOS], [8, EOS]], [[9, 10, 11], [12, 13, 14]])
    with torch.no_grad():
        logits, none = model(batch.src, batch.src_lens, batch.tgt_in)
        same, weights = model(batch.src, batch.src_lens, batch.tgt_in, -2)
        state = model.init_state(model.encode(batch.src, batch.src_lens))
        maps = []
        for t in range(batch.tgt_in.size(1)):
            _, step_maps, state = model.decode_step(batch.tgt_in[:, t], state)
            maps.append(step_maps[:, 1])  # (B, h, S): layer 1 = -2 of 3
    assert none is None and weights.shape == (2, 4, 1, 4, 4)  # (B, T, 1, h, S)
    torch.testing.assert_close(same, logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(weights[:, :, 0], torch.stack(maps, 1), rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def guided_runs(tmp_path_factory, demo_dir):
    """The same small GRU trained with and without guided alignment."""
    runs = {}
    for weight in (0.0, 1.0):
        run = tmp_path_factory.mktemp(f"guided{weight}")
        args = [f"data.local_dir={demo_dir}", f"run_dir={run}", "train.max_steps=150",
                "train.valid_every=150", "train.metric=loss", "train.valid_bleu=false",
                *SMALL, *SMALL_MODELS["gru"],
                f"train.guided_alignment.weight={weight}"]  # fmt: skip
        assert cli.train(args) == 0
        runs[weight] = run / "checkpoints" / "last"
    return runs


def _mass_on_links(ckpt, monkeypatch) -> float:
    """The share of the attention on the aligner's links, over the first 200 training pairs."""
    cfg = load_checkpoint(ckpt).config
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, resume=True))
    data, model, resumed = prepare_run(cfg)
    model.load_state_dict(resumed.payload["model"])
    with data.train as corpus:
        links = corpus_links(corpus, cfg.data.max_len)
        with monkeypatch.context() as patch:  # kept in the cache: never aligned twice
            patch.setattr(eflomal, "Aligner", lambda *a: pytest.fail("aligned again"))
            again = corpus_links(corpus, cfg.data.max_len)
        assert np.array_equal(again.offsets, links.offsets) and len(links.src) > 1000
        batch = corpus.batch(list(range(200)))
    with torch.no_grad():
        _, attention = model.eval()(batch.src, batch.src_lens, batch.tgt_in)
    targets = Guide(links, GuidedAlignmentConfig(weight=1.0)).targets(batch)
    linked = targets.sum(-1) > 0
    return float(((targets > 0) * attention[:, :, 0, 0]).sum() / linked.sum())


def test_guided_attention_puts_more_weight_on_the_links_and_is_read_back(guided_runs, monkeypatch):
    plain = Translator.from_checkpoint(guided_runs[0.0], device="cpu")
    taught = Translator.from_checkpoint(guided_runs[1.0], device="cpu")
    assert plain.facts.taught is None and taught.facts.taught == (-2, 0)
    assert reading_of(taught.facts.taught) == Reading(layer=-2, head=0, both=True)
    mass = {w: _mass_on_links(ckpt, monkeypatch) for w, ckpt in guided_runs.items()}
    assert mass[1.0] > mass[0.0] + 0.1, mass


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.attention=none", "model.bridge=linear"], "needs attention"),
        (["data.tokenizer.sample_alpha=0.1", "data.tokenizer.model_type=unigram"], "subword"),
        (["train.guided_alignment.head=3"], "head=3"),
    ],
)
def test_guided_alignment_that_cannot_run_is_refused_before_any_work(
    tmp_path, demo_dir, overrides, message, capsys
):
    args = [f"data.local_dir={demo_dir}", f"run_dir={tmp_path / 'run'}", "train.max_steps=1",
            "train.guided_alignment.weight=0.5", *SMALL, *SMALL_MODELS["gru"],
            *overrides]  # fmt: skip
    assert cli.train(args) != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_transformer_layer_it_lacks_and_a_missing_aligner_are_refused(
    tmp_path, demo_dir, capsys, monkeypatch
):
    base = [f"data.local_dir={demo_dir}", f"run_dir={tmp_path / 'run'}", "train.max_steps=1",
            "train.guided_alignment.weight=0.5", *SMALL, *SMALL_MODELS["transformer"]]  # fmt: skip
    assert cli.train([*base, "train.guided_alignment.layer=5"]) != 0
    assert "layer=5" in capsys.readouterr().err
    monkeypatch.setattr(guided.importlib.util, "find_spec", lambda name: None)
    assert cli.train(base) != 0
    assert "pip install 'nmt[align]'" in capsys.readouterr().err
    with pytest.raises(NMTError):
        guided.check_aligner()
