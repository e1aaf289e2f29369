"""Figures (matplotlib, imported lazily; every function takes an optional ``ax=``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> Axes:
    if ax is not None:
        return ax
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    _, new_ax = plt.subplots(figsize=figsize)
    return new_ax


def heatmap(
    values: np.ndarray,
    ax: Axes | None = None,
    *,
    label: str = "",
    title: str = "",
    vmin: float | None = None,
    vmax: float | None = None,
    cmap: str = "viridis",
) -> Axes:
    """Layers × heads heatmap (rows = layers, first layer at the top).

    Parameters
    ----------
    values
        ``[layers, heads]`` array.
    label
        Colour-bar label (the statistic's name).
    vmin, vmax
        Shared colour limits, to compare several heatmaps.
    """
    values = np.asarray(values, dtype=float)
    if values.ndim != 2:
        raise ValueError(f"values must be [layers, heads], got shape {values.shape}")
    layers, heads = values.shape
    ax = _axes(ax, (max(4.0, 0.35 * heads + 2), max(3.0, 0.22 * layers + 1)))
    image = ax.imshow(
        values, aspect="auto", cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest"
    )
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(0, heads, max(1, heads // 12)))
    ax.set_yticks(range(0, layers, max(1, layers // 15)))
    cast(Any, ax.figure).colorbar(image, ax=ax, label=label)
    if title:
        ax.set_title(title)
    return ax


def score_distributions(
    cross: np.ndarray,
    self_: np.ndarray,
    *,
    title: str = "",
    bins: int = 80,
) -> Figure:
    """The paper's Fig. 1 / 2d for one head: densities of cross (``X``) and self (``Y``)
    scores, and the CDF ``F_Y`` with the survival ``1 - F_X``; the shaded area under both is
    the upper bound ``A`` (Theorem 3.6).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    cross = np.sort(np.asarray(cross, dtype=float))
    self_ = np.sort(np.asarray(self_, dtype=float))
    if cross.size == 0 or self_.size == 0:
        raise ValueError("cross and self samples must be non-empty")
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    edges = np.histogram_bin_edges(np.concatenate([cross, self_]), bins=bins)
    left.hist(cross, bins=edges, density=True, alpha=0.6, label=f"cross X(p, g)  n={cross.size}")
    left.hist(self_, bins=edges, density=True, alpha=0.6, label=f"self Y(g, g)  n={self_.size}")
    left.set_xlabel("attention score <q, k>")
    left.set_ylabel("density")
    left.legend(fontsize=8)
    grid = np.unique(np.concatenate([cross, self_]))
    f_y = np.searchsorted(self_, grid, side="right") / self_.size
    s_x = 1.0 - np.searchsorted(cross, grid, side="right") / cross.size
    right.step(grid, f_y, where="post", label="F_Y (self)")
    right.step(grid, s_x, where="post", label="1 - F_X (cross)")
    right.fill_between(grid, np.minimum(f_y, s_x), step="post", alpha=0.3, label="overlap A")
    right.set_xlabel("attention score <q, k>")
    right.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def save_figure(fig_or_ax: Any, path: str | Path, *, dpi: int = 120) -> Path:
    """Write a figure (or an axes' figure) as PNG (or the format of ``path``'s suffix), close
    it if pyplot manages it, and return the path. The one place rcstat writes figures."""
    import matplotlib.pyplot as plt

    fig = fig_or_ax if hasattr(fig_or_ax, "savefig") else fig_or_ax.figure
    path = Path(path)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return path


def difference_heatmap(
    first: np.ndarray,
    second: np.ndarray,
    ax: Axes | None = None,
    *,
    label: str = "",
    title: str = "",
    cmap: str = "RdBu_r",
) -> Axes:
    """Layers × heads heatmap of ``first − second`` on a diverging colour map centred at 0.

    The colour limits are ``±max |first − second|``, so white is "no difference" and the two
    signs get the same scale (with the default map, red: ``first`` is larger).

    Parameters
    ----------
    first, second
        ``[layers, heads]`` arrays of the same statistic (e.g. two contexts' upper bounds).
    """
    first, second = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    if first.shape != second.shape:
        raise ValueError(f"shapes differ: {first.shape} vs {second.shape}")
    difference = first - second
    bound = float(np.abs(difference).max()) if difference.size else 0.0
    bound = bound if bound > 0 else 1.0
    return heatmap(difference, ax, label=label, title=title, vmin=-bound, vmax=bound, cmap=cmap)
