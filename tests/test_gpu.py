"""On a CUDA device: training in fp32/bf16/fp16, every search strategy, results equal to the CPU's,
resume, checkpoints that move between devices, fused attention kernels, and the CLI end to end.

Every test is marked `gpu` (deselected by default; `make test-gpu` runs them) and skips where CUDA
is absent. They drive the public entry points (the CLI overrides, `Translator`, `build_model`,
`decode_all`), not the trainer's internals, so a refactor of the training loop leaves them valid.
"""

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from nmt.checkpoint import load_checkpoint
from nmt.cli import main as cli
from nmt.config import DecodeConfig, RNNConfig, Split, Strategy, TransformerConfig
from nmt.data.batches import collate
from nmt.data.splits import encode, read_split
from nmt.models import build_model
from nmt.models.transformer import MultiHeadAttention
from nmt.tokenizer import EOS, PAD
from nmt.translation.search import decode_all
from nmt.translation.translator import Translator

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

DEVICE = "cuda"
CPU = torch.device("cpu")
# the tiny sizes of tests/test_train.py: seconds per run, still enough to learn the demo corpus
SMALL = ["data.tokenizer.vocab_size=400", "train.batch_tokens=600", "train.lr=0.003"]
SMALL_RNN = ["model.emb_size=64", "model.hidden_size=64", "model.dropout=0.1"]
SMALL_TRANSFORMER = ["model.d_model=32", "model.ff_size=64", "model.encoder_layers=2"]
QUIET = ["train.valid_bleu=false", "train.metric=loss"]  # validation by loss: no decoding
FAMILIES = ["gru_bahdanau", "lstm_luong", "transformer_small"]
TRAINED = ["gru_bahdanau", "transformer_small"]  # one model per family for the slower tests


def sizes(model: str) -> list[str]:
    return SMALL_TRANSFORMER if model.startswith("transformer") else SMALL_RNN


def train(run_dir: Path, demo_dir: Path, model: str, *extra: str) -> None:
    args = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={run_dir}", f"model={model}"]
    assert cli.train([*args, *SMALL, *sizes(model), *extra]) == 0


def train_rows(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if r["split"] == "train"}


@pytest.fixture
def exact_fp32():
    """TF32 rounds matmul and cuDNN inputs to 10 mantissa bits (cuDNN's flag is on by default):
    off here, so that fp32 on CUDA is comparable with fp32 on the CPU."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.fixture(scope="module")
def trained(tmp_path_factory, demo_dir):
    """`trained(model, device)`: the `last` checkpoint of a run of 400 updates on that device,
    trained once per module. 400 updates make the demo model confident (its smallest gap between
    the best and second-best next token along the greedy paths of the test split is > 1e-3 in
    log-probability, measured on the CPU), so rounding differences between devices (~1e-6)
    cannot flip a token."""
    runs: dict[tuple[str, str], Path] = {}

    def get(model: str, device: str) -> Path:
        if (model, device) not in runs:
            run = tmp_path_factory.mktemp(f"{model}-{device}")
            schedule = ["train.scheduler=noam", "train.warmup_steps=50"]
            train(
                run, demo_dir, model, f"device={device}", *QUIET,
                *(schedule if model.startswith("transformer") else []),
                "train.max_steps=400", "train.valid_every=400", "train.log_every=100",
            )  # fmt: skip
            runs[model, device] = run / "checkpoints" / "last"
        return runs[model, device]

    return get


def encoded_test_split(ckpt: Path) -> tuple[list[str], list[list[int]], list[list[int]]]:
    """The test split of the checkpoint's corpus: raw sources, source ids (EOS-terminated as in
    training) and target ids, encoded by the checkpoint's own tokenizer."""
    stored = load_checkpoint(ckpt)
    corpus = read_split(stored.config.data, Split.test)
    ids = encode(corpus, stored.vocabs)
    return corpus.src, ids.src, ids.tgt


# 1. training in every precision --------------------------------------------------------------


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("model", FAMILIES)
def test_a_few_updates_in_every_precision(tmp_path, demo_dir, model, precision):
    train(
        tmp_path, demo_dir, model, f"device={DEVICE}", f"train.precision={precision}", *QUIET,
        "train.max_steps=6", "train.valid_every=6", "train.log_every=1",
    )  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_losses = [r["loss"] for r in rows if r["split"] == "train"]
    valid_losses = [r["loss"] for r in rows if r["split"] == "valid"]
    assert len(train_losses) == 6 and len(valid_losses) == 1
    assert all(math.isfinite(x) for x in train_losses + valid_losses), rows
    # a finite loss proves nothing of a window whose updates were all skipped (its loss is 0 over
    # 0 tokens): one row per update here, and each says whether its update reached the weights
    train_rows = [r for r in rows if r["split"] == "train"]
    applied = [r["tokens"] > 0 for r in train_rows]
    assert applied == [r["skipped"] == 0 for r in train_rows], train_rows  # the counts agree
    assert applied == ["grad_norm" in r for r in train_rows], train_rows
    if precision == "fp16":  # GradScaler may skip the first updates while it lowers its scale
        assert any(applied) and all(applied[applied.index(True) :]), train_rows
    else:
        assert all(applied), train_rows
    ckpt = load_checkpoint(tmp_path / "checkpoints" / "last")
    assert ckpt.payload["step"] == 6
    # fp16 skips the updates whose scaled gradients overflow; none may leave a NaN in a weight
    weights = ckpt.payload["model"]
    assert all(bool(torch.isfinite(w).all()) for w in weights.values() if w.is_floating_point())
    assert all(w.dtype == torch.float32 for w in weights.values() if w.is_floating_point())


# 2. every search strategy on CUDA ------------------------------------------------------------

V = 31
TINY = {
    "gru_bahdanau": RNNConfig(emb_size=16, hidden_size=16, dropout=0.0),
    "lstm_luong": RNNConfig(
        emb_size=16, hidden_size=16, dropout=0.0, cell="lstm", decoder="luong",
        attention="general", encoder_layers=2, decoder_layers=2,
    ),
    "transformer": TransformerConfig(
        d_model=16, heads=4, ff_size=32, encoder_layers=2, decoder_layers=2, dropout=0.0
    ),
}  # fmt: skip
DECODINGS = {
    "greedy": DecodeConfig(batch_size=4),
    "beam": DecodeConfig(strategy=Strategy.beam, beam_size=3, n_best=2, batch_size=4),
    "sample": DecodeConfig(strategy=Strategy.sample, n_best=2, top_k=5, batch_size=4),
}


def tiny_model_and_sources(family: str) -> tuple[torch.nn.Module, list[list[int]]]:
    torch.manual_seed(0)
    model = build_model(TINY[family], V, V, shared_vocab=True).eval()
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 12, (9,), generator=g).tolist()
    return model, [torch.randint(4, V, (n,), generator=g).tolist() + [EOS] for n in lengths]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("decoding", DECODINGS)
@pytest.mark.parametrize("family", TINY)
def test_every_strategy_decodes_on_cuda(family, decoding, precision):
    """N n-best lists for N sources, in fp32 and under bf16 autocast (decode.precision=bf16)."""
    model, sources = tiny_model_and_sources(family)
    cfg, device = DECODINGS[decoding], torch.device(DEVICE)
    model = model.to(device)

    def run() -> list:
        if precision == "bf16":
            with torch.autocast(device.type, dtype=torch.bfloat16):
                return decode_all(model, sources, cfg, device, attention=True)
        return decode_all(model, sources, cfg, device, attention=True)

    nbests = run()
    assert len(nbests) == len(sources)
    assert all(len(hyps) == (1 if decoding == "greedy" else 2) for hyps in nbests)
    for src, hyps in zip(sources, nbests):
        for h in hyps:
            assert all(0 <= t < V for t in h.tokens) and math.isfinite(h.score)
            assert len(h.tokens) + h.ended <= cfg.max_len(len(src))
            assert h.attention.device == CPU and h.attention.shape[-1] == len(src)
    if decoding == "sample":  # the CUDA generator is seeded from cfg.seed: same draws again
        assert [[h.tokens for h in hyps] for hyps in run()] == [
            [h.tokens for h in hyps] for hyps in nbests
        ]


# 3. CUDA gives the CPU's results -------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
@pytest.mark.parametrize("model", TRAINED)
def test_cuda_decodes_the_same_tokens_as_the_cpu(trained, exact_fp32, model, strategy):
    ckpt = trained(model, "cpu")
    cfg = DecodeConfig(strategy=Strategy(strategy), beam_size=5)
    _, src_ids, _ = encoded_test_split(ckpt)
    results = {}
    for device in ("cpu", DEVICE):
        translator = Translator.from_checkpoint(ckpt, cfg, device=device)
        results[device] = decode_all(translator.model, src_ids, cfg, translator.device)
    assert_same_best(results[DEVICE], results["cpu"])


def assert_same_best(got: list, expected: list) -> None:
    """The best hypotheses of two searches: the same tokens, ended alike, scores equal up to
    fp32 rounding (sums of ~20 log-probabilities)."""
    assert [h[0].tokens for h in got] == [h[0].tokens for h in expected]
    assert [h[0].ended for h in got] == [h[0].ended for h in expected]
    assert [h[0].score for h in got] == pytest.approx(
        [h[0].score for h in expected], rel=1e-4, abs=1e-4
    )


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
@pytest.mark.parametrize("model", TRAINED)
def test_the_compiled_step_decodes_the_eager_tokens_on_cuda(trained, exact_fp32, model, strategy):
    """decode.compile=true on CUDA (torch.compile's Triton kernels): the eager tokens."""
    ckpt = trained(model, "cpu")
    cfg = DecodeConfig(strategy=Strategy(strategy), beam_size=5)
    _, src_ids, _ = encoded_test_split(ckpt)
    translator = Translator.from_checkpoint(ckpt, cfg, device=DEVICE)
    eager = decode_all(translator.model, src_ids, cfg, translator.device)
    compiled = decode_all(translator.model, src_ids, replace(cfg, compile=True), translator.device)
    assert_same_best(compiled, eager)


@pytest.mark.parametrize("model", TRAINED)
def test_teacher_forced_loss_on_cuda_equals_the_cpu(trained, exact_fp32, model):
    ckpt = trained(model, "cpu")
    _, src_ids, tgt_ids = encoded_test_split(ckpt)
    batch = collate(list(range(32)), src_ids, tgt_ids)  # (32, S) sources, (32, T) targets
    losses = {}
    for device in ("cpu", DEVICE):
        net = Translator.from_checkpoint(ckpt, device=device).model  # eval mode: no dropout
        on = batch.to(torch.device(device))
        with torch.no_grad():
            logits, _ = net(on.src, on.src_lens, on.tgt_in)  # (B, T, V)
        losses[device] = F.cross_entropy(
            logits.flatten(0, 1).float(), on.tgt_out.flatten(), ignore_index=PAD
        ).item()
    assert losses[DEVICE] == pytest.approx(losses["cpu"], rel=1e-4)


def test_transformer_incremental_decoding_equals_teacher_forcing_on_cuda(exact_fp32):
    """Teacher forcing runs the fused SDPA kernels, a decoding step the explicit cross-attention
    and a one-query self-attention over the KV cache: the same logits on CUDA too."""
    model, sources = tiny_model_and_sources("transformer")
    device = torch.device(DEVICE)
    model = model.to(device)
    g = torch.Generator().manual_seed(2)
    targets = [torch.randint(4, V, (8,), generator=g).tolist() for _ in sources]
    batch = collate(list(range(len(sources))), sources, targets).to(device)
    with torch.no_grad():
        logits, _ = model(batch.src, batch.src_lens, batch.tgt_in)  # (B, T, V)
        state = model.init_state(model.encode(batch.src, batch.src_lens))
        steps = []
        for t in range(batch.tgt_in.size(1)):
            out, _, state = model.decode_step(batch.tgt_in[:, t], state)
            steps.append(out)
    torch.testing.assert_close(torch.stack(steps, 1), logits, rtol=1e-4, atol=1e-4)


# 4. resume on CUDA ---------------------------------------------------------------------------


@pytest.mark.parametrize("model", FAMILIES)
def test_resume_on_cuda_gives_the_losses_of_an_uninterrupted_run(tmp_path, demo_dir, model):
    common = [
        f"device={DEVICE}", *QUIET, "train.log_every=1", "train.valid_every=5",
        "train.scheduler=noam", "train.warmup_steps=3", "model.dropout=0.3",
    ]  # fmt: skip
    train(tmp_path / "straight", demo_dir, model, *common, "train.max_steps=10")
    train(tmp_path / "split", demo_dir, model, *common, "train.max_steps=5")
    train(tmp_path / "split", demo_dir, model, *common, "train.max_steps=10", "train.resume=true")
    straight, split = train_rows(tmp_path / "straight"), train_rows(tmp_path / "split")
    assert sorted(split) == list(range(1, 11))
    # Equal up to rounding, not bit for bit as on the CPU (tests/test_train.py): the same batches,
    # dropout masks (the CUDA RNG state is checkpointed) and updates, but cuDNN's RNN backward,
    # the atomic adds of embedding/index backward kernels and the fused attention backward may
    # sum in a different order on every run, so even two uninterrupted runs can differ in the
    # last bits.
    assert [split[s] for s in sorted(split)] == pytest.approx(
        [straight[s] for s in sorted(straight)], rel=1e-5, abs=1e-5
    )


@pytest.mark.parametrize("model", TRAINED)
def test_one_process_under_torchrun_is_the_plain_run_on_cuda(tmp_path, demo_dir, model):
    """torchrun --nproc_per_node 1 on one GPU sets WORLD_SIZE=1: nmt-train runs as a plain
    process (no NCCL group, no DistributedDataParallel), so the losses are the plain run's, up to
    the run-to-run rounding of CUDA kernels (see the resume test above)."""
    common = [
        f"device={DEVICE}", *QUIET, "train.log_every=1", "train.valid_every=5",
        "train.max_steps=5", "model.dropout=0.3",
    ]  # fmt: skip
    train(tmp_path / "plain", demo_dir, model, *common)
    run = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={tmp_path / 'torchrun'}"]
    args = [*run, f"model={model}", *SMALL, *sizes(model), *common]
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
        "--no-python", sys.executable, "-c", "from nmt.cli.main import main_train; main_train()",
        *args,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    plain, launched = train_rows(tmp_path / "plain"), train_rows(tmp_path / "torchrun")
    assert sorted(launched) == [1, 2, 3, 4, 5]
    assert [launched[s] for s in sorted(launched)] == pytest.approx(
        [plain[s] for s in sorted(plain)], rel=1e-5, abs=1e-5
    )


# 5. checkpoints move between devices ---------------------------------------------------------


@pytest.mark.parametrize("trained_on", ["cpu", DEVICE])
@pytest.mark.parametrize("model", TRAINED)
def test_a_checkpoint_translates_the_same_on_either_device(trained, exact_fp32, model, trained_on):
    ckpt = trained(model, trained_on)
    assert all(t.device == CPU for t in load_checkpoint(ckpt).payload["model"].values())
    sources = encoded_test_split(ckpt)[0][:40] + ["", "Ich sehe einundzwanzig rote Äpfel."]
    greedy = DecodeConfig()
    texts = {
        device: Translator.from_checkpoint(ckpt, greedy, device=device).translate(sources)
        for device in ("cpu", DEVICE)
    }
    assert len(texts["cpu"]) == len(sources) and texts["cpu"][-2] == ""
    assert texts[DEVICE] == texts["cpu"]


def test_a_run_started_on_cuda_resumes_on_the_cpu(tmp_path, demo_dir):
    """Optimizer state and RNG states saved from CUDA load onto the CPU."""
    common = [*QUIET, "train.log_every=1", "train.valid_every=3"]
    train(tmp_path, demo_dir, "gru_bahdanau", f"device={DEVICE}", *common, "train.max_steps=3")
    train(
        tmp_path, demo_dir, "gru_bahdanau", "device=cpu", *common,
        "train.max_steps=6", "train.resume=true",
    )  # fmt: skip
    losses = train_rows(tmp_path)
    assert sorted(losses) == list(range(1, 7)) and all(math.isfinite(x) for x in losses.values())


# 6. fused SDPA kernels vs the explicit attention ---------------------------------------------


@pytest.mark.parametrize("kind", ["cross-padded", "self-causal"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_fused_attention_kernels_match_the_explicit_softmax(exact_fp32, precision, kind):
    """`need_weights=False` runs F.scaled_dot_product_attention (restricted here to the fused
    flash / memory-efficient kernels, so the math fallback cannot stand in for them);
    `need_weights=True` the explicit softmax. Same output within the precision's rounding."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    device = torch.device(DEVICE)
    torch.manual_seed(0)
    attention = MultiHeadAttention(128, 4, dropout=0.0).to(device).eval()  # 4 heads of 32
    x = torch.randn(3, 9, 128, device=device)  # (B, T, d) queries
    if kind == "cross-padded":
        memory = torch.randn(3, 13, 128, device=device)  # (B, S, d)
        src_lens = torch.tensor([13, 6, 1], device=device)
        fused_mask = torch.arange(13, device=device) < src_lens[:, None]  # (B, S)
        fused_mask = explicit_mask = fused_mask[:, None, None, :]  # (B, 1, 1, S)
        causal = False
    else:  # the explicit path takes the causal pattern as a mask, the fused one as a flag
        memory, fused_mask, causal = x, None, True
        explicit_mask = torch.ones(9, 9, dtype=torch.bool, device=device).tril()  # (T, T)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    fused_kernels = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    with torch.no_grad(), autocast:
        keys, values = attention.project_kv(memory)  # (B, h, S, k)
        with sdpa_kernel(fused_kernels):
            fused, none = attention(x, keys, values, fused_mask, causal=causal)
        explicit, weights = attention(x, keys, values, explicit_mask, need_weights=True)
    assert none is None and weights.shape == (3, 4, 9, memory.size(1))
    assert fused.dtype == explicit.dtype == (torch.bfloat16 if precision == "bf16" else torch.float)
    tolerance = 2e-2 if precision == "bf16" else 1e-5
    torch.testing.assert_close(fused.float(), explicit.float(), rtol=tolerance, atol=tolerance)


def test_the_cuda_device_keeps_attention_off_the_cudnn_kernel():
    """cuDNN's SDPA kernel builds a plan for every new shape, and sentence batches bring new shapes
    all the time: bf16 Transformer training ran 5x slower with it on an H200 (docs/gpu.md).
    Choosing a CUDA device turns it off for the process."""
    from nmt.device import resolve_device

    resolve_device(DEVICE)
    assert not torch.backends.cuda.cudnn_sdp_enabled()


# 7. the command-line tools on CUDA -----------------------------------------------------------


def run_translate(ckpt: Path, stdin: bytes, *overrides: str) -> subprocess.CompletedProcess:
    """The nmt-translate console script in a fresh process, with cuDNN's TF32 off (see
    `exact_fp32`): the command as a user runs it, numerically comparable with the CPU."""
    code = (
        "import torch; torch.backends.cudnn.allow_tf32 = False; "
        "from nmt.cli.main import main_translate; main_translate()"
    )
    return subprocess.run(
        [sys.executable, "-c", code, f"ckpt={ckpt}", *overrides], input=stdin, capture_output=True
    )


@pytest.mark.parametrize("model", TRAINED)
def test_evaluate_and_translate_commands_run_on_cuda(trained, exact_fp32, tmp_path, capsys, model):
    """The command path that crashed on CUDA before (search built its length limits on the CPU):
    nmt-evaluate with beam search and heatmaps, nmt-translate in batch mode, both device=cuda,
    give the CPU's output."""
    ckpt = trained(model, "cpu")
    for device in ("cpu", DEVICE):
        args = [f"ckpt={ckpt}", f"device={device}", f"out_dir={tmp_path / device}", "heatmaps=1"]
        assert cli.evaluate(args) == 0
        assert "BLEU = " in capsys.readouterr().out
    scores = json.loads((tmp_path / DEVICE / "test.scores.json").read_text())
    assert scores["sentences"] == 100
    assert (tmp_path / DEVICE / "test.attention.0.png").stat().st_size > 1000
    hyps = {d: (tmp_path / d / "test.hyp").read_text().splitlines() for d in ("cpu", DEVICE)}
    assert len(hyps[DEVICE]) == 100 and hyps[DEVICE] == hyps["cpu"]

    lines = ["Ich sehe einundzwanzig rote Äpfel.", "", "Er zählt zwölf Katzen."]
    stdin = "\n".join(lines).encode() + b"\n\xff\xfe invalid utf-8\n"  # 4 lines
    out = {}
    for device in ("cpu", DEVICE):
        result = run_translate(ckpt, stdin, f"device={device}", "decode=greedy")
        assert result.returncode == 0, result.stderr.decode()
        out[device] = result.stdout.decode("utf-8").split("\n")
    assert len(out[DEVICE]) == 5 and out[DEVICE][1] == "" and out[DEVICE][-1] == ""
    assert out[DEVICE] == out["cpu"]
    sampled = run_translate(ckpt, stdin, f"device={DEVICE}", "decode=sample", "decode.n_best=2")
    assert sampled.returncode == 0, sampled.stderr.decode()
    assert len(sampled.stdout.decode("utf-8").split("\n")) == 5


def captured_batches(count: int) -> list:
    """`count` training batches of random pieces padded to one shape (16 rows of 16, as
    train.length_step=16 pads them), on the device: each replays the same captured graph."""
    from nmt.data.batches import fixed_shape

    rng = torch.Generator().manual_seed(5)
    batches = []
    for _ in range(count):
        lens = torch.randint(1, 15, (2, 12), generator=rng).tolist()
        src = [torch.randint(4, 40, (n,), generator=rng).tolist() + [EOS] for n in lens[0]]
        tgt = [torch.randint(4, 40, (n,), generator=rng).tolist() for n in lens[1]]
        batch = fixed_shape(collate(list(range(12)), src, tgt), batch_tokens=256, length_step=16)
        batches.append(batch.to(torch.device(DEVICE)))
    assert {tuple(b.src.shape) for b in batches} == {(16, 16)}
    return batches


@pytest.mark.parametrize(
    "micro_batches",
    [
        1,
        pytest.param(
            2,
            marks=pytest.mark.xfail(
                strict=False,
                reason="train.cuda_graphs refuses train.accum_steps > 1 until this passes on a GPU",
            ),
        ),
    ],
)
def test_cuda_graph_gradients_equal_eager(exact_fp32, micro_batches):
    """The gradients of an update under torch.compile's "reduce-overhead" mode (what
    train.cuda_graphs=true runs: the step captured as CUDA graphs and replayed, each forward
    marked a new step, as the trainer marks it) equal eager gradients, in every round: the first
    runs without graphs, the second records them, the later ones replay. With 2 micro-batches
    per update (train.accum_steps=2) a replay may overwrite the gradient buffers the first
    micro-batch left: the case nmt refuses. Tolerance: inductor fuses and reorders float sums
    (on the CPU, where no graph is captured, 2e-6 apart at most, in gradients up to 1e-2)."""
    from nmt.training.loss import batch_loss

    torch.manual_seed(0)
    cfg = TransformerConfig(
        d_model=32, heads=4, ff_size=64, encoder_layers=1, decoder_layers=1, dropout=0.0,
        attention_dropout=0.0,
    )  # fmt: skip
    model = build_model(cfg, 40, 40, shared_vocab=True).to(DEVICE).train()
    batches = captured_batches(micro_batches)

    def gradients(forward: torch.nn.Module, mark_steps: bool) -> list[tuple[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        for batch in batches:
            if mark_steps:
                torch.compiler.cudagraph_mark_step_begin()
            loss, _ = batch_loss(forward, batch, smoothing=0.1)
            loss.backward()
        return [(name, p.grad.detach().clone()) for name, p in model.named_parameters()]

    eager = gradients(model, mark_steps=False)
    captured = torch.compile(model, mode="reduce-overhead")
    for _ in range(4):  # warm-up, recording, then replays
        graphs = gradients(captured, mark_steps=True)
        assert [name for name, _ in graphs] == [name for name, _ in eager]
        for (name, want), (_, got) in zip(eager, graphs, strict=True):
            # float sums in another order err in proportion to the tensor's largest entries:
            # an entry that cancels to near 0 may differ by far more than 1e-4 of itself
            scale = 1e-4 * float(want.abs().max())
            torch.testing.assert_close(
                got, want, rtol=1e-4, atol=scale, msg=lambda m, n=name: f"{n}: {m}"
            )


def test_training_with_cuda_graphs_gives_the_losses_of_eager_training(
    tmp_path, demo_dir, exact_fp32
):
    """nmt-train with train.compile=true train.cuda_graphs=true (and the fixed shapes they need)
    trains as eager training does: the same losses for 6 updates, within float tolerance (inductor
    reorders float sums; 2e-7 apart where measured on the CPU)."""
    common = [
        f"device={DEVICE}", "train.length_step=8", "train.max_steps=6", "train.log_every=1",
        "train.valid_every=6", *QUIET, "model.dropout=0.0", "model.attention_dropout=0.0",
    ]  # fmt: skip
    train(tmp_path / "eager", demo_dir, "transformer_small", *common)
    graphs = ["train.compile=true", "train.cuda_graphs=true"]
    train(tmp_path / "graphs", demo_dir, "transformer_small", *common, *graphs)
    eager, captured = train_rows(tmp_path / "eager"), train_rows(tmp_path / "graphs")
    assert sorted(captured) == [1, 2, 3, 4, 5, 6]
    assert captured == pytest.approx(eager, rel=1e-4)
