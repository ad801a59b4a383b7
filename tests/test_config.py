"""Every YAML composes onto its schema and builds; typos and bad values fail before any work."""

import re
from pathlib import Path

import pytest

from nmt.cli import compose
from nmt.cli import main as cli
from nmt.config import DecodeConfig, RNNConfig, TransformerConfig
from nmt.errors import NMTError
from nmt.models import build_model
from nmt.run_config import TrainRunConfig

CONFIGS = compose.config_dir()


def names(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


@pytest.mark.parametrize("model", names("model"))
@pytest.mark.parametrize("data", names("data"))
def test_every_model_and_data_config_composes_and_builds(model, data):
    overrides = [f"model={model}", f"data={data}", "data.local_dir=x"]
    overrides += ["data.src_lang=de", "data.tgt_lang=en"]  # data=files leaves them to the user
    cfg = cli.compose_config("train", overrides)
    assert isinstance(cfg, TrainRunConfig)
    family = RNNConfig if model.startswith(("gru", "lstm")) else TransformerConfig
    assert isinstance(cfg.model, family) and cfg.model.name == model
    assert cfg.data.name == data
    built = build_model(cfg.model, 300, 300, shared_vocab=True)
    assert sum(p.numel() for p in built.parameters()) > 0


@pytest.mark.parametrize("experiment", names("experiment"))
def test_every_experiment_composes_and_builds(experiment):
    # the experiment file's first comment line is the command that runs it: it composes as written
    lines = (CONFIGS / "experiment" / f"{experiment}.yaml").read_text().splitlines()
    assert lines[0] == "# @package _global_" and lines[1].startswith("# ")
    command = re.search(r"nmt-train ((?:[\w.]+=[^\s)]+ ?)+)", lines[1])
    assert command, lines[1]
    overrides = command.group(1).split()
    assert f"experiment={experiment}" in overrides
    cfg = cli.compose_config("train", overrides)
    build_model(cfg.model, 300, 300, shared_vocab=True)


@pytest.mark.parametrize(
    "attention", ["dot", "scaled_dot", "general", "concat", "additive", "multihead", "none"]
)
@pytest.mark.parametrize("model", ["gru_bahdanau", "gru_luong"])
def test_attention_is_one_config_value(model, attention):
    cfg = cli.compose_config("train", [f"model={model}", f"model.attention={attention}"])
    assert cfg.model.attention.value == attention
    build_model(cfg.model, 50, 50)


# the arguments each entry point cannot do without
REQUIRED = {
    "train": [],
    "evaluate": ["ckpt=x"],
    "translate": ["ckpt=x"],
    "average": ["run_dir=x"],
    "plot": ["run_dir=x"],
    "serve": ["ckpt=x"],
    "export": ["ckpt=x", "out=y"],
    "score": ["ckpt=x"],
    "import": ["source=x", "out=y"],
}


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIGS.glob("*.yaml")))
def test_every_primary_config_composes(name):
    cfg = cli.compose_config(name, REQUIRED[name])  # a new entry point must be listed above
    assert type(cfg).__name__ == f"{name.capitalize()}RunConfig"


def test_average_composes():
    cfg = cli.compose_config("average", ["run_dir=runs/x", "last=3"])
    assert (cfg.run_dir, cfg.ckpts, cfg.last, cfg.out) == ("runs/x", None, 3, None)
    cfg = cli.compose_config("average", ["ckpts=[runs/a/checkpoints/step-2,b]", "out=c"])
    assert cfg.ckpts == ["runs/a/checkpoints/step-2", "b"] and cfg.run_dir is None


def test_evaluate_and_translate_compose():
    ev = cli.compose_config("evaluate", ["ckpt=somewhere", "split=valid"])
    assert ev.ckpt == "somewhere" and ev.split.value == "valid" and ev.data is None
    ev = cli.compose_config("evaluate", ["ckpt=x", "data=multi30k"])
    assert ev.data.name == "multi30k"
    tr = cli.compose_config("translate", ["ckpt=x", "decode.max_len_b=3"])
    assert tr.decode.max_len_b == 3


def error_of(main, argv, capsys) -> str:
    assert main(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and err.count("\n") == 0, err
    return err


def test_key_typo_lists_the_valid_keys(capsys):
    err = error_of(cli.train, ["model.atention=dot"], capsys)
    assert "model.atention" in err and "attention" in err and "hidden_size" in err


def test_bad_choice_lists_the_valid_values(capsys):
    err = error_of(cli.train, ["model.attention=dott"], capsys)
    for value in ("dot", "scaled_dot", "general", "concat", "additive", "multihead"):
        assert value in err


def test_unknown_group_option_lists_the_options(capsys):
    err = error_of(cli.train, ["model=gru_bahdanauu"], capsys)
    assert "gru_bahdanau" in err and "gru_luong" in err


def test_invalid_combination_fails_at_composition(capsys):
    err = error_of(cli.train, ["model.hidden_size=255"], capsys)
    assert "even" in err


def test_files_template_asks_for_the_directory(capsys):
    err = error_of(cli.train, ["data=files", "data.src_lang=de", "data.tgt_lang=en"], capsys)
    assert "data.local_dir" in err


def test_missing_checkpoint_argument(capsys):
    assert "ckpt" in error_of(cli.evaluate, [], capsys)


def test_user_config_dir_is_searched(tmp_path, capsys):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mine.yaml").write_text(
        "defaults:\n  - rnn\n  - _self_\nname: mine\nhidden_size: 64\n"
    )
    cfg = cli.compose_config("train", ["model=mine"], str(tmp_path))
    assert cfg.model.name == "mine" and cfg.model.hidden_size == 64


def test_print_config(capsys):
    assert cli.train(["--cfg", "model=gru_luong"]) == 0
    assert "decoder: luong" in capsys.readouterr().out


def test_configs_ship_in_the_wheel():
    """pyproject maps configs/ into the wheel as nmt/configs, where config_dir() looks first."""
    text = (Path(cli.__file__).parents[2] / "pyproject.toml").read_text()
    assert '"configs" = "nmt/configs"' in text


@pytest.mark.parametrize("decode", names("decode"))
def test_every_decode_config_composes_for_every_entry_point(decode):
    for entry, extra in (("train", []), ("evaluate", ["ckpt=x"]), ("translate", ["ckpt=x"])):
        cfg = cli.compose_config(entry, [f"decode={decode}", *extra])
        assert isinstance(cfg.decode, DecodeConfig) and cfg.decode.strategy.value == decode


@pytest.mark.parametrize(
    "override, message",
    [
        ("decode.n_best=3", "needs decode=beam or decode=sample"),
        ("decode.strategy=beams", "beam"),
        ("decode.length_penalty=gnm", "gnmt"),
        ("decode.top_p=0", "top_p"),
    ],
)
def test_bad_decode_options_fail_at_composition(override, message, capsys):
    assert cli.translate(["ckpt=x", "decode=greedy", override]) == cli.EXIT_USAGE
    assert message in capsys.readouterr().err


def test_shared_embeddings_without_a_joint_vocabulary_fail_at_composition(capsys):
    args = ["model=transformer_small", "data.tokenizer.joint=false"]
    assert cli.train(args) == cli.EXIT_USAGE
    assert "data.tokenizer.joint=true" in capsys.readouterr().err
    cfg = cli.compose_config("train", [*args, "model.share_embeddings=false"])
    assert not cfg.model.share_embeddings


def test_help_lists_the_config_groups_with_their_options(capsys):
    """`nmt-train --help` names every group and every option in it, the default marked, and
    where each key is documented; each command lists only the groups it composes."""
    with pytest.raises(SystemExit) as done:
        cli.train(["--help"])
    assert done.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())  # the option lists wrap
    for group in ("data", "model", "train", "decode", "experiment"):
        assert f"{group}:" in shown
        for option in sorted((CONFIGS / group).glob("*.yaml")):
            assert option.stem in shown, (group, option.stem)
    assert "[gru_bahdanau]" in shown and "[greedy]" in shown
    assert "configs/train.yaml" in shown and "nmt/run_config.py (TrainRunConfig)" in shown
    with pytest.raises(SystemExit):
        cli.translate(["--help"])
    shown = capsys.readouterr().out
    assert "decode:" in shown and "[beam]" in shown and "model:" not in shown


GRAPHS = ["train.compile=true", "train.cuda_graphs=true"]


def test_cuda_graphs_with_gradient_accumulation_are_refused_before_any_work(tmp_path, capsys):
    """The issue's command: the captured backward's gradient buffers are overwritten by the next
    replay, so accumulating over micro-batches is refused until a GPU test proves it sums right.
    data.local_dir names nothing: the refusal comes before any data is looked for."""
    run_dir = tmp_path / "run"
    argv = ["experiment=demo", *GRAPHS, "train.accum_steps=2", f"run_dir={run_dir}"]
    argv += [f"data.local_dir={tmp_path / 'absent'}"]
    err = error_of(cli.train, argv, capsys)
    assert "train.cuda_graphs=true with train.accum_steps=2" in err
    assert "set train.accum_steps=1 with train.batch_tokens=4096" in err  # the demo's 2,048 x 2
    assert "train.cuda_graphs=false" in err
    assert "until a GPU test proves equal gradients" in err
    assert not run_dir.exists()
    # with fixed shapes too: the accumulation is what is refused
    err = error_of(cli.train, [*argv, "train.length_step=8"], capsys)
    assert "train.accum_steps=2" in err


def test_cuda_graphs_without_fixed_shapes_are_refused(tmp_path, capsys):
    where = [f"run_dir={tmp_path / 'run'}", f"data.local_dir={tmp_path / 'absent'}"]
    err = error_of(cli.train, [*GRAPHS, *where], capsys)
    assert "train.length_step > 0 (e.g. train.length_step=8)" in err
    assert "train.cuda_graphs=false" in err


def test_cuda_graphs_compose_with_fixed_shapes_and_single_batch_updates():
    cfg = cli.compose_config("train", [*GRAPHS, "train.length_step=8"]).train
    assert cfg.cuda_graphs and cfg.compile and cfg.length_step == 8 and cfg.accum_steps == 1


def test_a_key_of_a_group_no_option_chose_names_the_options():
    """nmt-evaluate reads its checkpoint's data config unless data=NAME is given: setting one of
    its keys alone is refused by name, with the options, not with OmegaConf's 'NoneType'."""
    with pytest.raises(NMTError, match=r"data\.local_dir: .*data=NAME \(.*multi30k.*\)"):
        cli.compose_config("evaluate", ["ckpt=runs/x", "data.local_dir=corpus"])
    cfg = cli.compose_config("evaluate", ["ckpt=runs/x", "data=multi30k", "data.local_dir=corpus"])
    assert cfg.data.local_dir == "corpus"


def test_src_lang_auto_is_refused_by_name_where_a_command_reads_one_language(tmp_path, capsys):
    """nmt-translate identifies each line's language (src_lang=auto); nmt-evaluate and nmt-score
    read one language, and refuse "auto" before any work rather than take it for a code."""

    none = tmp_path / "no-checkpoint"
    assert cli.evaluate([f"ckpt={none}", "src_lang=auto"]) == 2
    assert "nmt-evaluate reads a test set in one language" in capsys.readouterr().err
    assert cli.score([f"ckpt={none}", "src_lang=auto"]) == 2
    assert "nmt-score scores translations of sources in one language" in capsys.readouterr().err
