"""Keep docs/attention.md true to the code: refresh its code excerpts and redraw its heatmaps.

    python scripts/attention_doc.py            # excerpts + heatmaps (needs the trained runs below)
    python scripts/attention_doc.py --code     # excerpts only
    python scripts/attention_doc.py --check    # exit 1 if an excerpt no longer matches the code

An excerpt in the page is a block between `<!-- code: PATH QUALNAME -->` and `<!-- /code -->`;
QUALNAME is a class, `Class.method` or a function of PATH. The block is rewritten with the source of
that definition and its line numbers, so the page cannot drift from the code unnoticed
(tests/test_docs.py runs --check).

Heatmaps: one Multi30k validation sentence is force-decoded through its reference translation by
every run given (step by step, as search decodes, so every model family gives its maps), so all
images share their rows and columns and differ only in where each model attends. The runs are
the scorer sweep of docs/benchmarks.md plus a Bahdanau-decoder run and a Transformer; the
commands that train them are in docs/attention.md.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "attention.md"
IMAGES = ROOT / "docs" / "attention"
BLOCK = re.compile(r"<!-- code: (\S+) (\S+) -->\n.*?<!-- /code -->", re.DOTALL)
DEFAULT_RUNS = [
    "runs/scorers/0",  # luong + dot
    "runs/scorers/1",  # luong + scaled_dot
    "runs/scorers/2",  # luong + general
    "runs/scorers/3",  # luong + concat
    "runs/scorers/4",  # luong + additive
    "runs/scorers/5",  # luong + multihead
    "runs/scorers_bahdanau",  # bahdanau + additive
    "runs/m30k_transformer",  # transformer
]


def definition(path: Path, qualname: str) -> tuple[int, int, str]:
    """(first line, last line, dedented source) of a class, method or function in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    node: ast.AST = tree
    for name in qualname.split("."):
        found = [
            child
            for child in ast.iter_child_nodes(node)
            if isinstance(child, ast.ClassDef | ast.FunctionDef) and child.name == name
        ]
        if not found:
            raise SystemExit(f"attention_doc: {qualname} not found in {path}")
        node = found[0]
    lines = path.read_text(encoding="utf-8").splitlines()
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return first, node.end_lineno, textwrap.dedent("\n".join(lines[first - 1 : node.end_lineno]))


def refresh(text: str) -> str:
    """The page with every code block rewritten from the current source."""

    def block(match: re.Match) -> str:
        rel, qualname = match.group(1), match.group(2)
        first, last, source = definition(ROOT / rel, qualname)
        link = f"[`{rel}` lines {first}–{last}](../{rel}#L{first}-L{last})"
        fenced = f"```python\n{source}\n```"
        return f"<!-- code: {rel} {qualname} -->\n{link}\n\n{fenced}\n<!-- /code -->"

    return BLOCK.sub(block, text)


def forced_maps(ckpt_dir: Path, source: str, reference: str):
    """Force-decode `reference` as the translation of `source`, one step at a time.
    Returns (source pieces, target pieces, maps (T, L, h, S), the checkpoint's model config)."""
    import torch

    from nmt.checkpoint import load_checkpoint
    from nmt.models import restore_model
    from nmt.tokenizer import BOS, EOS

    ckpt = load_checkpoint(ckpt_dir)
    model = restore_model(ckpt, torch.device("cpu"))
    src_ids = ckpt.vocabs.src.encode([source])[0] + [EOS]
    tgt_ids = ckpt.vocabs.tgt.encode([reference])[0] + [EOS]
    with torch.inference_mode():
        src = torch.tensor([src_ids])
        state = model.init_state(model.encode(src, torch.tensor([len(src_ids)])))
        maps = []
        for prev in [BOS, *tgt_ids[:-1]]:
            _, step_maps, state = model.decode_step(torch.tensor([prev]), state)
            maps.append(step_maps[0])  # (L, h, S)
    src_pieces = ckpt.vocabs.src.id_to_piece(src_ids)
    tgt_pieces = ckpt.vocabs.tgt.id_to_piece(tgt_ids)
    return src_pieces, tgt_pieces, torch.stack(maps), ckpt.config.model


def name_of(model_cfg) -> str:
    if model_cfg.arch == "transformer":
        return "transformer"
    return f"{model_cfg.decoder.value}_{model_cfg.attention.value}"


def draw(runs: list[Path], source: str, reference: str) -> None:
    from nmt.translation.attention_map import save_heatmap, save_heatmap_grid, select_map

    IMAGES.mkdir(parents=True, exist_ok=True)
    panels = []
    for run in runs:
        src_pieces, tgt_pieces, maps, model_cfg = forced_maps(
            run / "checkpoints" / "best", source, reference
        )
        name, where = name_of(model_cfg), run.resolve().relative_to(ROOT)
        matrix = select_map(maps)  # the top layer, heads averaged
        save_heatmap(src_pieces, tgt_pieces, matrix, IMAGES / f"{name}.png", f"{name} ({where})")
        panels.append((name, matrix))
        layers, heads = maps.size(1), maps.size(2)
        if layers > 1:  # every layer x head of a Transformer
            save_heatmap_grid(src_pieces, tgt_pieces, maps, IMAGES / f"{name}_heads.png", name)
        elif heads > 1:  # the heads of a recurrent multi-head scorer, two per row
            heads_panels = [(f"head {i}", maps[:, 0, i]) for i in range(heads)]
            grid(heads_panels, src_pieces, tgt_pieces, IMAGES / f"{name}_heads.png", columns=2)
        print(f"{name}: docs/attention/{name}.png ({where})")
    grid(panels, src_pieces, tgt_pieces, IMAGES / "all.png", columns=2)
    print("all models side by side: docs/attention/all.png")


def grid(panels, src_pieces, tgt_pieces, path: Path, columns: int) -> None:
    """Matrices (T, S) with the same pieces, `columns` per row, labels on the outer edges."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = -(-len(panels) // columns)
    cell_w, cell_h = 0.22 * len(src_pieces) + 1.2, 0.2 * len(tgt_pieces) + 0.8
    fig, axes = plt.subplots(
        rows, columns, figsize=(cell_w * columns, cell_h * rows), squeeze=False
    )
    for k, ax in enumerate(axes.flat):
        if k >= len(panels):
            ax.axis("off")
            continue
        title, matrix = panels[k]
        ax.imshow(matrix.float().numpy(), cmap="viridis", vmin=0, vmax=1, aspect="auto")
        ax.set_title(title, fontsize=9)
        bottom = k + columns >= len(panels)
        ax.set_xticks(range(len(src_pieces)), src_pieces if bottom else [], rotation=90, fontsize=6)
        ax.set_yticks(range(len(tgt_pieces)), tgt_pieces if k % columns == 0 else [], fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def validation_pair(data_dir: Path, line: int) -> tuple[str, str]:
    src = (data_dir / "val.de").read_text(encoding="utf-8").splitlines()[line]
    ref = (data_dir / "val.en").read_text(encoding="utf-8").splitlines()[line]
    return src, ref


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if an excerpt is stale")
    parser.add_argument("--code", action="store_true", help="refresh the excerpts only")
    parser.add_argument("--runs", nargs="*", default=DEFAULT_RUNS, help="run directories")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--line", type=int, default=4, help="the validation sentence (from 0)")
    args = parser.parse_args()
    text = DOC.read_text(encoding="utf-8")
    fresh = refresh(text)
    if args.check:
        if fresh != text:
            print(f"{DOC} is stale: run python scripts/attention_doc.py --code", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(fresh, encoding="utf-8")
    if not args.code:
        source, reference = validation_pair(Path(args.data), args.line)
        print(f"source: {source}\nreference: {reference}")
        draw([ROOT / r for r in args.runs], source, reference)
    return 0


if __name__ == "__main__":
    sys.exit(main())
