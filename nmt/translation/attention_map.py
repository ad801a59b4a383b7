"""Attention maps for people: a text matrix for the terminal and a heatmap PNG."""

from __future__ import annotations

from pathlib import Path

from torch import Tensor

from nmt.errors import NMTError


def select_map(maps: Tensor, layer: int | None = -1, head: int | None = None) -> Tensor:
    """One attention matrix from the maps of a hypothesis.

    maps (T, L, h, S) -> (T, S): `layer` indexes the L attention layers (negative from the top;
    None averages them), `head` the h heads (None averages them).
    """
    layers, heads = maps.size(1), maps.size(2)
    if layer is not None and not -layers <= layer < layers:
        raise NMTError(
            f"attention layer {layer} out of range: this model has {layers} (0..{layers - 1})"
        )
    if head is not None and not 0 <= head < heads:
        raise NMTError(
            f"attention head {head} out of range: this model has {heads} (0..{heads - 1})"
        )
    chosen = maps.mean(dim=1) if layer is None else maps[:, layer]  # (T, h, S)
    return chosen.mean(dim=1) if head is None else chosen[:, head]


def format_attention(src_pieces: list[str], tgt_pieces: list[str], weights: Tensor) -> str:
    """Rows are target pieces, columns source pieces; cells are weights in percent ('.' below 5).

    weights (len(tgt_pieces), len(src_pieces)).
    """
    widths = [max(len(p), 3) for p in src_pieces]
    label = max([len(p) for p in tgt_pieces] + [1])
    lines = [" " * label + " " + " ".join(p.rjust(w) for p, w in zip(src_pieces, widths))]
    for piece, row in zip(tgt_pieces, weights.tolist()):
        cells = [(f"{round(100 * v)}" if v >= 0.05 else ".").rjust(w) for v, w in zip(row, widths)]
        lines.append(piece.rjust(label) + " " + " ".join(cells))
    return "\n".join(lines)


def save_heatmap(
    src_pieces: list[str], tgt_pieces: list[str], weights: Tensor, path: str | Path, title: str = ""
) -> Path:
    """Write the attention matrix (len(tgt_pieces), len(src_pieces)) as a PNG heatmap."""
    plt = _pyplot()

    rows, cols = len(tgt_pieces), len(src_pieces)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * cols + 1.5), max(3.0, 0.4 * rows + 1.2)))
    image = ax.imshow(weights.float().numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(cols), src_pieces, rotation=90, fontsize=8)
    ax.set_yticks(range(rows), tgt_pieces, fontsize=8)
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    if title:
        ax.set_title(_printable(title), fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.04)
    fig.tight_layout()
    return _save(fig, path)


def save_heatmap_grid(
    src_pieces: list[str], tgt_pieces: list[str], maps: Tensor, path: str | Path, title: str = ""
) -> Path:
    """Every layer (rows) and head (columns) of maps (T, L, h, S) in one PNG."""
    plt = _pyplot()

    layers, heads = maps.size(1), maps.size(2)
    rows, cols = len(tgt_pieces), len(src_pieces)
    cell_w, cell_h = max(2.5, 0.3 * cols + 1.0), max(2.0, 0.27 * rows + 0.8)
    fig, axes = plt.subplots(
        layers, heads, figsize=(cell_w * heads, cell_h * layers), squeeze=False
    )
    for i in range(layers):
        for j in range(heads):
            ax = axes[i][j]
            ax.imshow(maps[:, i, j].float().numpy(), cmap="viridis", vmin=0, vmax=1, aspect="auto")
            ax.set_title(f"layer {i} head {j}", fontsize=8)
            ax.set_xticks(
                range(cols), src_pieces if i == layers - 1 else [], rotation=90, fontsize=6
            )
            ax.set_yticks(range(rows), tgt_pieces if j == 0 else [], fontsize=6)
    if title:
        fig.suptitle(_printable(title), fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def _printable(text: str) -> str:
    """A title without control characters (an untrained model's byte pieces decode to them, and
    fonts have no glyph for them)."""
    return "".join(c if c.isprintable() else "\ufffd" for c in text)


def _pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display needed), imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | Path) -> Path:
    plt = _pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
