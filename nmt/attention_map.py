"""Attention maps for people: a text matrix for the terminal and a heatmap PNG."""

from __future__ import annotations

from pathlib import Path

from torch import Tensor


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
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    rows, cols = len(tgt_pieces), len(src_pieces)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * cols + 1.5), max(3.0, 0.4 * rows + 1.2)))
    image = ax.imshow(weights.float().numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(cols), src_pieces, rotation=90, fontsize=8)
    ax.set_yticks(range(rows), tgt_pieces, fontsize=8)
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    if title:
        ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.04)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
