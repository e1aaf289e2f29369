"""Per-head RC scores for one example (paper §5.1).

``analyze`` runs one teacher-forced forward pass of ``s = p ⊕ g`` with the score capture
active; each layer's generation block ``[heads, |g|, |p| + |g|]`` is reduced on the spot to
per-head statistics (expected RC, upper and lower bound, normalized RC) and freed, so memory
grows with one layer's block, never with the number of layers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd
import torch

from rcstat.capture import attention_layout, capture_scores
from rcstat.capture.graphs import kept_graphs
from rcstat.capture.host import stack_on_host
from rcstat.checks import check_count, check_tau
from rcstat.defaults import DEFAULT_MAX_NEW_TOKENS, DEFAULT_TAU
from rcstat.generation import (
    check_example,
    check_max_new_tokens,
    check_window,
    generate_answer,
    input_device,
)
from rcstat.segments import Segmented, segment_chat, segment_text
from rcstat.stats import block_statistics, cross_self_samples, triton_available

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

Statistic = Literal["expected", "upper", "lower", "normalized"]
STATISTICS: tuple[Statistic, ...] = ("expected", "upper", "lower", "normalized")


@dataclass
class HeadSamples:
    """Raw cross (``X(p, g)``) and self (``Y(g, g)``) scores of one head, for plots."""

    layer: int
    head: int
    cross: np.ndarray  # [|g|·|p|]
    self_: np.ndarray  # [|g|(|g|+1)/2]


@dataclass
class HeadAnalysis:
    """Per-(layer, head) RC statistics of one example.

    Attributes
    ----------
    expected, upper, lower, normalized
        ``[layers, heads]`` float64: ``E(X(p, g), Y(g, g))``, the overlap-area upper bound
        ``A``, the lower bound ``a`` and the scale-free ``E / (E + E_reverse)``. ``lower``
        is None when it was not computed (see ``lower_bound`` of :func:`analyze`).
    prompt_len, gen_len
        ``|p|`` and ``|g|`` in tokens.
    prompt_text, generation_text
        The text of ``p`` and ``g`` as tokenised.
    scaled
        True when scores were multiplied by ``1/sqrt(d)`` (raw ``<q, k>`` otherwise).
    samples
        Raw score samples of the heads requested with ``keep_samples``.
    generation_finished
        For a generation the model wrote: True if it ended with a stop token, False if it was
        cut at ``max_new_tokens``; None for a generation given as text.
    """

    expected: np.ndarray
    upper: np.ndarray
    lower: np.ndarray | None
    normalized: np.ndarray
    prompt_len: int
    gen_len: int
    prompt_text: str
    generation_text: str
    model_name: str = ""
    scaled: bool = False
    samples: list[HeadSamples] = field(default_factory=list)
    generation_finished: bool | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """``(layers, heads)``."""
        return (int(self.expected.shape[0]), int(self.expected.shape[1]))

    def values(self, by: Statistic = "upper") -> np.ndarray:
        """The ``[layers, heads]`` array of one statistic."""
        if by not in STATISTICS:
            raise ValueError(f"by must be one of {STATISTICS}, got {by!r}")
        if by == "lower" and self.lower is None:
            raise ValueError(
                "the lower bound was not computed for this analysis: pass lower_bound=True "
                "(--lower-bound) to analyze"
            )
        return np.asarray(getattr(self, by))

    @property
    def statistics(self) -> tuple[Statistic, ...]:
        """The statistics this analysis holds (``lower`` only when computed)."""
        return tuple(name for name in STATISTICS if getattr(self, name) is not None)

    def count_above(self, tau: float = DEFAULT_TAU, by: Statistic = "upper") -> int:
        """Number of heads whose statistic exceeds ``tau`` (paper §5.1: ``A_h > τ = 1.5``)."""
        tau = check_tau("tau", tau)
        return int((self.values(by) > tau).sum())

    def to_frame(self) -> pd.DataFrame:
        """One row per (layer, head) with every statistic it holds."""
        layers, heads = self.shape
        frame = pd.DataFrame(
            {
                "layer": np.repeat(np.arange(layers), heads),
                "head": np.tile(np.arange(heads), layers),
            }
        )
        for name in self.statistics:
            frame[name] = self.values(name).reshape(-1)
        return frame

    def top(self, k: int = 10, by: Statistic = "expected") -> pd.DataFrame:
        """The ``k`` heads with the largest statistic ``by``, highest first."""
        check_count("k", k)
        frame = self.to_frame().sort_values(by, ascending=False, kind="stable")
        return frame.head(k).reset_index(drop=True)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (statistics as nested lists)."""
        return {
            "model": self.model_name,
            "prompt_len": self.prompt_len,
            "gen_len": self.gen_len,
            "prompt_text": self.prompt_text,
            "generation_text": self.generation_text,
            "scaled": self.scaled,
            "generation_finished": self.generation_finished,
            **{name: None for name in STATISTICS},
            **{name: self.values(name).tolist() for name in self.statistics},
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), indent=1)

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_json` to ``path``."""
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> HeadAnalysis:
        """Read a file written by :meth:`save`.

        Raises
        ------
        ValueError
            Naming the file, if it is not UTF-8 JSON or not a head analysis: a field missing,
            a statistic that is not a ``[layers, heads]`` array of numbers of the others'
            shape, or token counts that are not counts.
        """
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: not a JSON file ({err})") from None
        fields = (*_SAVED_STATISTICS, "prompt_len", "gen_len", "prompt_text", "generation_text")
        missing = [f for f in fields if not isinstance(data, dict) or data.get(f) is None]
        if missing:
            raise ValueError(
                f"{path}: not a head analysis written by HeadAnalysis.save (no "
                f"{', '.join(missing)})"
            )
        array = {
            name: _statistic(path, data, name) for name in STATISTICS if data.get(name) is not None
        }
        shapes = {value.shape for value in array.values()}
        if len(shapes) > 1:
            raise ValueError(f"{path}: the statistics have different shapes {sorted(shapes)}")
        for count in ("prompt_len", "gen_len"):
            if isinstance(data[count], bool) or not isinstance(data[count], int):
                raise ValueError(f"{path}: {count} is {data[count]!r}, not a token count")
        return cls(
            expected=array["expected"],
            upper=array["upper"],
            lower=array.get("lower"),
            normalized=array["normalized"],
            prompt_len=data["prompt_len"],
            gen_len=data["gen_len"],
            prompt_text=data["prompt_text"],
            generation_text=data["generation_text"],
            model_name=str(data.get("model") or ""),
            scaled=bool(data.get("scaled", False)),
            generation_finished=data.get("generation_finished"),
        )


#: The statistics every saved analysis holds (``lower`` only when it was computed).
_SAVED_STATISTICS = ("expected", "upper", "normalized")


def _statistic(path: Path, data: dict[str, Any], name: str) -> np.ndarray:
    """``data[name]`` as a ``[layers, heads]`` float64 array; ``ValueError`` naming ``path``."""
    try:
        value = np.asarray(data[name], dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{path}: {name} is not an array of numbers") from None
    if value.ndim != 2:
        raise ValueError(f"{path}: {name} has shape {value.shape}, not [layers, heads]")
    return value


def _reduce_block(
    keep: dict[int, list[int]], prompt_len: int, samples: list[HeadSamples], lower: bool
) -> Any:
    def reduce(layer: int, scores: torch.Tensor) -> dict[str, torch.Tensor]:
        block = scores[0]  # [head, g, m + g]
        # unchecked here: non-finite scores make mean_gap non-finite (the capture's flag)
        stats = block_statistics(block, prompt_len, check_finite=False, lower=lower)
        for head in keep.get(layer, []):
            x, _, y, _ = cross_self_samples(block[head], prompt_len)
            samples.append(HeadSamples(layer, head, x.cpu().numpy(), y.cpu().numpy()))
        out = {  # left on the layer's device: no synchronisation inside the forward pass
            "expected": stats.expected,
            "upper": stats.upper,
            "normalized": stats.normalized,
            "mean_gap": stats.mean_gap,
        }
        if stats.lower is not None:
            out["lower"] = stats.lower
        return out

    return reduce


def analyze_segmented(
    model: PreTrainedModel,
    example: Segmented,
    *,
    scaled: bool = False,
    keep_samples: Sequence[tuple[int, int]] = (),
    lower_bound: bool | None = None,
) -> HeadAnalysis:
    """Per-head statistics of an already tokenised example (one forward pass).

    Parameters
    ----------
    model
        A Hugging Face causal LM (see :mod:`rcstat.capture`).
    example
        Prompt and generation tokens; the generation must be non-empty.
    scaled
        Use the model's scaled scores ``<q, k>/sqrt(d)`` instead of raw ``<q, k>``.
    keep_samples
        ``(layer, head)`` pairs whose raw cross/self scores are kept for plotting.
    lower_bound
        Compute the lower bound ``a`` (eq. 5). ``None`` (default): where it is free, that is
        everywhere except on CUDA with Triton installed, where E and A never sort the cross
        samples but ``a`` needs their order (docs/benchmarks.md §6.3).
    """
    layout = check_example(model, example)
    keep: dict[int, list[int]] = {}
    for layer, head in keep_samples:
        if not (0 <= layer < layout.num_layers and 0 <= head < layout.num_heads):
            raise ValueError(
                f"head {layer}.{head} does not exist: the model has {layout.num_layers} layers "
                f"× {layout.num_heads} heads"
            )
        keep.setdefault(layer, []).append(head)
    samples: list[HeadSamples] = []
    device = input_device(model)
    lower = not triton_available(device) if lower_bound is None else bool(lower_bound)
    reducer = _reduce_block(keep, example.prompt_len, samples, lower)
    # the layers' graphs stay on the model while calls of these lengths follow each other
    graphs = kept_graphs(model, "analyze")
    scope = graphs.scope((example.prompt_len, example.gen_len, lower, scaled))
    with (
        torch.no_grad(),
        capture_scores(
            model,
            reducer,
            query_start=example.prompt_len,
            scaled=scaled,
            # float64 sums over every score: non-finite iff a score is (no scan of the block)
            finite=lambda out: torch.isfinite(out["mean_gap"]).all(),
            # kept heads copy their samples to the host: those layers run eagerly
            graph_key=lambda layer: None if layer in keep else ("block", scope),
            graphs=graphs,
        ) as result,
    ):
        model(example.input_ids.to(device), use_cache=False, logits_to_keep=1)
    per_layer = result.ordered()

    def stacked(name: str) -> np.ndarray:
        return stack_on_host([r[name] for r in per_layer]).numpy()  # [layers, heads]

    return HeadAnalysis(
        expected=stacked("expected"),
        upper=stacked("upper"),
        lower=stacked("lower") if lower else None,
        normalized=stacked("normalized"),
        prompt_len=example.prompt_len,
        gen_len=example.gen_len,
        prompt_text=example.text[: example.offsets[example.prompt_len][0]],
        generation_text=example.text[example.offsets[example.prompt_len][0] :],
        model_name=str(getattr(model.config, "_name_or_path", "")),
        scaled=scaled,
        samples=samples,
    )


def analyze(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    *,
    context: str | None = None,
    question: str | None = None,
    answer: str | None = None,
    prompt: str | None = None,
    generation: str | None = None,
    question_placement: Literal["prompt", "generation"] = "prompt",
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    scaled: bool = False,
    keep_samples: Sequence[tuple[int, int]] = (),
    allow_special_tokens: bool = False,
    lower_bound: bool | None = None,
) -> HeadAnalysis:
    """Per-(layer, head) RC of one example: which heads ground the generation in the prompt.

    Two input modes:

    - chat: ``context``, ``question`` and optionally ``answer``. The user turn is
      ``context + "\\n\\n" + question`` rendered with the tokenizer's chat template; the
      question ends the prompt (or starts the generation with
      ``question_placement="generation"``).
    - raw: ``prompt`` and optionally ``generation``, no chat template. The prompt is tokenised
      with the tokenizer's default special tokens, the generation with
      ``add_special_tokens=False``, and the two are concatenated.

    Without an answer / generation the model generates one greedily (``max_new_tokens``);
    :attr:`HeadAnalysis.generation_finished` tells whether it ended or was cut at the limit.

    User text is tokenized as literal text: a special-token string such as ``<|im_start|>``
    inside it cannot open or close a chat turn. ``allow_special_tokens=True`` encodes such
    strings as special tokens (only for trusted text).

    ``lower_bound`` as in :func:`analyze_segmented` (default: computed where it is free).

    Returns
    -------
    HeadAnalysis
        ``E_h``, ``A_h``, ``a_h`` and the normalized RC per head (paper §5.1, eq. 6).

    Notes
    -----
    ``E_h = E(X(p, g), Y(g, g))`` with ``X(p, g) = {f(i, j): i ∈ p, j ∈ g}`` and
    ``Y(g, g) = {f(k, l): k <= l ∈ g}`` (paper eq. 6, Theorem 3.6), computed exactly.
    """
    check_max_new_tokens(max_new_tokens)
    layout = attention_layout(model)
    chat = context is not None or question is not None or answer is not None
    raw = prompt is not None or generation is not None
    if chat == raw:
        raise ValueError(
            "give either context= and question= (with optional answer=) or prompt= "
            "(with optional generation=)"
        )
    if chat:
        if context is None or question is None:
            raise ValueError("chat mode needs both context= and question=")
        example = segment_chat(
            tokenizer,
            context,
            question,
            answer,
            question_placement=question_placement,
            allow_special_tokens=allow_special_tokens,
        )
        needs_generation = answer is None
    else:
        assert prompt is not None
        example = segment_text(
            tokenizer,
            prompt,
            generation,
            allow_special_tokens=allow_special_tokens,
        )
        needs_generation = generation is None
    check_window(layout, example.seq_len)  # before generating
    finished: bool | None = None
    if needs_generation:
        answered = generate_answer(model, tokenizer, example, max_new_tokens)
        example, finished = answered.example, answered.finished
    result = analyze_segmented(
        model, example, scaled=scaled, keep_samples=keep_samples, lower_bound=lower_bound
    )
    result.generation_finished = finished
    return result
