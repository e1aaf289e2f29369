"""The result of an attribution: span scores of every answer unit, for any head selection.

:class:`Attribution` holds what one forward pass of :class:`~rcstat.attribution.Attributor`
measured — the per-head ranking scores and the per-head span scores ``e_h(p_i)`` — and
answers eq. (10) of the paper for any head selection without running the model again:
``RC(p_i) = Σ_{h∈H} e_h(p_i) / Σ_{i'} Σ_{h∈H} e_h(p_{i'})``, the unit going to
``argmax_i RC(p_i)``. It saves to and loads from one ``.npz`` file (arrays and a JSON header,
read back without pickle), and renders as a table, JSON or a self-contained HTML page.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

import numpy as np
import pandas as pd

from rcstat.attribution.spans import TextSpan, split_sentences
from rcstat.checks import check_count
from rcstat.defaults import DEFAULT_TOP_K, SpanScore, resolve_span_score

__all__ = [
    "HEAD_RANKINGS",
    "Attribution",
    "Granularity",
    "HeadRanking",
    "SpanStatistic",
    "eq10_normalize",
]

HeadRanking = Literal["top", "bottom", "all", "top_post_softmax", "bottom_post_softmax"]
SpanStatistic = Literal["expected", "upper"]
Granularity = Literal["chunk", "sentence", "token"]
HEAD_RANKINGS: tuple[str, ...] = get_args(HeadRanking)
_SAVE_FORMAT = "rcstat-attribution-1"
_ARRAYS = ("ranking", "per_head", "token_scores", "attention")
_RANK_ROW = {  # row of Attribution.ranking: (statistic, post-softmax) -> index
    ("expected", False): 0,
    ("upper", False): 1,
    ("expected", True): 2,
    ("upper", True): 3,
}


def eq10_normalize(totals: np.ndarray) -> tuple[np.ndarray, list[int | None]]:
    """Eq. (10) normalisation over spans ``[U, S]``; a unit whose total is 0 stays undecided."""
    sums = totals.sum(axis=-1, keepdims=True)  # [U, 1]
    scores = np.divide(totals, sums, out=np.zeros_like(totals), where=sums > 0)
    attributed = [
        int(np.argmax(row)) if total > 0 else None for row, total in zip(scores, sums, strict=True)
    ]
    return scores, attributed


@dataclass
class Attribution:
    """Span scores of one example for every answer unit, reusable for any head selection.

    Attributes
    ----------
    question, answer, context
        The texts (``context`` is the chunks joined when chunks were given).
    spans, units
        Candidate spans (character ranges of ``context``) and answer units (of ``answer``).
    span_tokens, unit_tokens
        Their token ranges ``[start, end)``: absolute for spans, relative to the first
        answer token for units.
    ranking
        ``[4, layers, heads]``: E and A of each head on raw scores, then E and A on
        post-softmax weights (over the whole sequence; paper §4.2 step 1). NaN where not
        computed: A with the expected statistic, the post-softmax rows unless requested.
    per_head
        ``[layers, heads, U, S]``: ``e_h(p_i)`` (or the upper bound) per unit and span.
    token_scores
        ``[layers, heads, U, C]`` float32: the per-key parts ``t_h`` over the ``C`` context
        tokens (token-level views).
    attention
        ``[U, C]``: post-softmax attention of each unit to each context token, averaged over
        heads, layers and the unit's queries.
    context_tokens
        The ``C`` context token strings (their concatenation is ``context``).
    context_start
        Absolute position of the first context token (column 0 of ``token_scores`` and
        ``attention``).
    statistic, head_ranking, top_k, span_score
        The configuration of :attr:`scores` / :attr:`attributed` / :attr:`heads`
        (``span_score``: see :meth:`head_totals`).
    gold
        Optional gold span per unit (set by benchmarks), used by the HTML view.
    finished
        False when the answer was generated and cut at ``max_new_tokens``: its last unit is
        then an unfinished sentence (marked in :meth:`to_frame`, :meth:`to_json` and the HTML).
    """

    question: str
    answer: str
    context: str
    spans: list[TextSpan]
    units: list[TextSpan]
    span_tokens: list[tuple[int, int]]
    unit_tokens: list[tuple[int, int]]
    ranking: np.ndarray
    per_head: np.ndarray
    token_scores: np.ndarray
    attention: np.ndarray
    context_tokens: list[str]
    context_start: int
    statistic: SpanStatistic = "expected"
    head_ranking: HeadRanking = "top"
    top_k: int | None = DEFAULT_TOP_K
    gold: list[int | None] = field(default_factory=list)
    finished: bool = True
    span_score: SpanScore = "mean"
    _sentences: list[list[tuple[int, int]]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        resolve_span_score(self.span_score, self.statistic)

    @property
    def num_heads(self) -> int:
        """Number of (layer, head) pairs of the model."""
        return int(self.per_head.shape[0] * self.per_head.shape[1])

    def heads_for(self, head_ranking: HeadRanking, top_k: int | None) -> list[tuple[int, int]]:
        """The ``(layer, head)`` pairs a ranking selects, best first (``"all"``: every head).

        Raises
        ------
        ValueError
            Unknown ranking, or ``top_k`` not in ``1 .. layers·heads``.
        """
        if head_ranking not in HEAD_RANKINGS:
            raise ValueError(f"head_ranking must be one of {HEAD_RANKINGS}, got {head_ranking!r}")
        layers, heads = self.per_head.shape[:2]
        if head_ranking == "all":
            return [(layer, head) for layer in range(layers) for head in range(heads)]
        check_heads_top_k(top_k, self.num_heads)
        post = head_ranking.endswith("post_softmax")
        values = self.ranking[_RANK_ROW[(self.statistic, post)]].reshape(-1)
        if np.isnan(values).any():
            raise ValueError(
                "the post-softmax ranking was not computed: create the Attributor with "
                "rank_post_softmax=True (or a post-softmax head_ranking)"
            )
        order = np.argsort(values if head_ranking.startswith("bottom") else -values, kind="stable")
        return [divmod(int(i), heads) for i in order[: cast(int, top_k)]]

    def scores_for(
        self, head_ranking: HeadRanking, top_k: int | None, span_score: SpanScore | None = None
    ) -> tuple[np.ndarray, list[int | None]]:
        """Eq. (10) scores ``[U, S]`` and the attributed span per unit for a head selection
        (``span_score``: see :meth:`head_totals`; default :attr:`span_score`)."""
        return self.scores_for_heads(self.heads_for(head_ranking, top_k), span_score)

    def scores_for_heads(
        self, heads: Sequence[tuple[int, int]], span_score: SpanScore | None = None
    ) -> tuple[np.ndarray, list[int | None]]:
        """Eq. (10) scores ``[U, S]`` and the attributed span per unit for any given set of
        ``(layer, head)`` pairs, e.g. a set fixed over a dataset (:func:`consensus_heads`)."""
        return eq10_normalize(self.head_totals(heads, span_score))

    def head_totals(
        self, heads: Sequence[tuple[int, int]], span_score: SpanScore | None = None
    ) -> np.ndarray:
        """``[U, S]`` span scores of ``heads`` before the eq. (10) normalisation.

        ``span_score`` (default :attr:`span_score`) says how a span's keys make its score, with
        ``t_h(g', i)`` the key-level expected RC (:mod:`rcstat.attribution.reduce`):

        * ``"mean"`` (the paper's eq. 10): ``Σ_h e_h(p_i)`` with ``e_h(p_i) = E(X(p_i, g'),
          Y(g, g')) = mean_{i∈p_i} t_h(g', i)`` (or the upper bound ``A`` with
          ``statistic="upper"``);
        * ``"sum"``: ``Σ_h Σ_{i∈p_i} t_h(g', i)`` — the mean times the span's length in
          tokens, so longer spans weigh more, as attention mass does;
        * ``"sentence"``: the span's best sentence, ``max_{s⊂p_i} Σ_h mean_{i∈s} t_h(g', i)``
          (sentences of :func:`~rcstat.attribution.spans.split_sentences`): a long chunk is
          not diluted by its sentences the unit does not use.

        ``"sum"`` and ``"sentence"`` add up per-key parts, which only the expected RC has.

        Raises
        ------
        ValueError
            Unknown ``span_score``, a per-key one with ``statistic="upper"``, or no head.
        """
        how = self.span_score if span_score is None else span_score
        resolve_span_score(how, self.statistic)
        chosen = list(heads)
        if not chosen:
            raise ValueError("heads: give at least one (layer, head) pair")
        layers, per_layer = self.per_head.shape[:2]
        for layer, head in chosen:
            if not (0 <= layer < layers and 0 <= head < per_layer):
                raise ValueError(
                    f"heads: ({layer}, {head}) is outside the model's {layers} layers × "
                    f"{per_layer} heads"
                )
        rows, cols = (np.array(v) for v in zip(*chosen, strict=True))
        if how == "mean":
            return self.per_head[rows, cols].sum(axis=0)  # [U, S]
        if how == "sum":
            lengths = np.array([end - start for start, end in self.span_tokens])  # [S]
            return self.per_head[rows, cols].sum(axis=0) * lengths
        keys = self.token_scores[rows, cols].sum(axis=0, dtype=np.float64)  # [U, C]
        prefix = np.pad(keys.cumsum(axis=-1), ((0, 0), (1, 0)))  # [U, C + 1]
        best = np.empty((keys.shape[0], len(self.spans)))  # [U, S]
        for s, pieces in enumerate(self._sentence_tokens()):
            bounds = np.array(pieces)  # [n, 2]
            means = (prefix[:, bounds[:, 1]] - prefix[:, bounds[:, 0]]) / (
                bounds[:, 1] - bounds[:, 0]
            )  # [U, n]
            best[:, s] = means.max(axis=1)
        return best

    def _sentence_tokens(self) -> list[list[tuple[int, int]]]:
        """Per span, the token ranges of its sentences (columns of :attr:`token_scores`),
        inside the span's own tokens; a span with no sentence is its own single piece."""
        if self._sentences is None:
            lengths = np.array([len(t) for t in self.context_tokens])
            ends = np.cumsum(lengths)  # [C]: token k covers [ends[k] - len, ends[k])
            starts = ends - lengths
            first = self.context_start
            pieces = []
            for span, (lo, hi) in zip(self.spans, self.span_tokens, strict=True):
                lo, hi = lo - first, hi - first
                if hi - lo == 1:  # one token (token granularity): nothing to split
                    pieces.append([(lo, hi)])
                    continue
                found = []
                for sentence in split_sentences(span.text):
                    a, b = span.start + sentence.start, span.start + sentence.end
                    hit = np.nonzero((starts < b) & (ends > a))[0]
                    a_tok = max(int(hit[0]), lo) if len(hit) else lo
                    b_tok = min(int(hit[-1]) + 1, hi) if len(hit) else hi
                    if b_tok > a_tok:
                        found.append((a_tok, b_tok))
                pieces.append(found or [(lo, hi)])
            self._sentences = pieces
        return self._sentences

    def attention_scores(self) -> tuple[np.ndarray, list[int | None]]:
        """The baseline: attention mass on each span (mean over heads, layers and the unit's
        queries, summed over the span's tokens), normalised over spans."""
        first = self.context_start
        mass = np.stack(
            [self.attention[:, s - first : e - first].sum(axis=1) for s, e in self.span_tokens],
            axis=1,
        )  # [U, S]
        return eq10_normalize(mass)

    @property
    def heads(self) -> list[tuple[int, int]]:
        """The heads of this result's configuration."""
        return self.heads_for(self.head_ranking, self.top_k)

    @property
    def scores(self) -> np.ndarray:
        """``[U, S]`` normalised scores (eq. 10) of this result's configuration."""
        return self.scores_for(self.head_ranking, self.top_k)[0]

    @property
    def attributed(self) -> list[int | None]:
        """Per unit, the index of the highest-scoring span (None when every score is 0)."""
        return self.scores_for(self.head_ranking, self.top_k)[1]

    @property
    def method(self) -> str:
        """A readable name of this result's configuration."""
        name = _method_name(self.head_ranking, self.top_k, self.statistic)
        suffix = {"mean": "", "sum": ", span sum", "sentence": ", best sentence"}
        return name + suffix[self.span_score]

    @property
    def head_scores(self) -> np.ndarray:
        """``[layers, heads]``: each head's ranking score on raw scores with this result's
        statistic (``E(X(p, g), Y(g, g))``, or ``A``), the input of :func:`consensus_heads`."""
        return self.ranking[_RANK_ROW[(self.statistic, False)]]

    def token_weights(self, heads: Sequence[tuple[int, int]] | None = None) -> np.ndarray:
        """``[U, C]`` token-level RC summed over ``heads`` (default: :attr:`heads`), each unit
        normalised over the context tokens."""
        chosen = self.heads if heads is None else list(heads)
        rows, cols = (np.array(v) for v in zip(*chosen, strict=True))
        return eq10_normalize(self.token_scores[rows, cols].sum(axis=0).astype(np.float64))[0]

    def to_frame(self) -> pd.DataFrame:
        """One row per (unit, span): texts, offsets, normalised score, attributed flag."""
        scores, attributed = self.scores_for(self.head_ranking, self.top_k)
        rows = []
        for u, unit in enumerate(self.units):
            for s, span in enumerate(self.spans):
                rows.append(
                    {
                        "unit": u,
                        "unit_text": unit.text,
                        "span": s,
                        "span_start": span.start,
                        "span_end": span.end,
                        "span_text": span.text,
                        "score": float(scores[u, s]),
                        "attributed": attributed[u] == s,
                        "unit_complete": self.unit_complete(u),
                    }
                )
        return pd.DataFrame(rows)

    def unit_complete(self, unit: int) -> bool:
        """False for the last unit of an answer cut at the token limit."""
        return self.finished or unit < len(self.units) - 1

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready dict: texts, spans, heads used, and per unit its scores."""
        scores, attributed = self.scores_for(self.head_ranking, self.top_k)
        return {
            "method": self.method,
            "question": self.question,
            "answer": self.answer,
            "answer_finished": self.finished,
            "context": self.context,
            "heads": [list(h) for h in self.heads],
            "spans": [{"start": s.start, "end": s.end, "text": s.text} for s in self.spans],
            "units": [
                {
                    "start": unit.start,
                    "end": unit.end,
                    "text": unit.text,
                    "complete": self.unit_complete(u),
                    "attributed": attributed[u],
                    "scores": [float(v) for v in scores[u]],
                }
                for u, unit in enumerate(self.units)
            ],
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), indent=1)

    def save(self, path: str | Path) -> Path:
        """Write everything (arrays and texts) to one ``.npz`` file; :meth:`load` reads it back
        without pickle. Returns the path written."""
        path = Path(path)
        if path.suffix != ".npz":
            raise ValueError(f"Attribution.save writes a .npz file, got {path.name!r}")
        header = {
            "format": _SAVE_FORMAT,
            "question": self.question,
            "answer": self.answer,
            "context": self.context,
            "spans": [[s.start, s.end, s.text] for s in self.spans],
            "units": [[u.start, u.end, u.text] for u in self.units],
            "span_tokens": [list(s) for s in self.span_tokens],
            "unit_tokens": [list(u) for u in self.unit_tokens],
            "context_tokens": self.context_tokens,
            "context_start": self.context_start,
            "statistic": self.statistic,
            "head_ranking": self.head_ranking,
            "top_k": self.top_k,
            "span_score": self.span_score,
            "gold": self.gold,
            "finished": self.finished,
        }
        with path.open("wb") as handle:
            np.savez_compressed(
                handle,
                header=np.array(json.dumps(header)),
                ranking=self.ranking,
                per_head=self.per_head,
                token_scores=self.token_scores,
                attention=self.attention,
            )
        return path

    @classmethod
    def load(cls, path: str | Path) -> Attribution:
        """Read a file written by :meth:`save` (never unpickles).

        Raises
        ------
        ValueError
            Naming the file, if it is not an ``.npz`` archive of an attribution (another file,
            an archive without the header or an array, another format).
        """
        try:
            archive = np.load(Path(path), allow_pickle=False)
        except (ValueError, EOFError, zipfile.BadZipFile):  # another file, empty, truncated
            raise ValueError(
                f"{path}: not an rcstat attribution file (not an .npz archive)"
            ) from None
        with archive as data:
            missing = [k for k in ("header", *_ARRAYS) if k not in data.files]
            if missing:
                raise ValueError(
                    f"{path}: not an rcstat attribution file (no {', '.join(missing)})"
                )
            header = json.loads(str(data["header"]))
            found = header.get("format") if isinstance(header, dict) else type(header).__name__
            if found != _SAVE_FORMAT:
                raise ValueError(f"{path}: not an rcstat attribution file (format {found!r})")
            arrays = {k: np.array(data[k]) for k in _ARRAYS}
        return cls(
            question=header["question"],
            answer=header["answer"],
            context=header["context"],
            spans=[TextSpan(int(a), int(b), str(s)) for a, b, s in header["spans"]],
            units=[TextSpan(int(a), int(b), str(s)) for a, b, s in header["units"]],
            span_tokens=[(int(a), int(b)) for a, b in header["span_tokens"]],
            unit_tokens=[(int(a), int(b)) for a, b in header["unit_tokens"]],
            context_tokens=list(header["context_tokens"]),
            context_start=int(header["context_start"]),
            statistic=header["statistic"],
            head_ranking=header["head_ranking"],
            top_k=header["top_k"],
            span_score=header.get("span_score", "mean"),  # files of 0.x before the option
            gold=list(header["gold"]),
            finished=bool(header["finished"]),
            **arrays,
        )


def _method_name(head_ranking: str, top_k: int | None, statistic: str) -> str:
    stat = "" if statistic == "expected" else f", {statistic} bound"
    if head_ranking == "all":
        return f"all heads (RC{stat})"
    side, _, post = head_ranking.partition("_")
    source = "post-softmax RC" if post else "RC"
    return f"{side}-{top_k} {source} heads{stat}"


def check_heads_top_k(top_k: int | None, num_heads: int) -> None:
    """``top_k`` must be an int in ``1 .. num_heads`` for a top/bottom ranking."""
    check_count("top_k", top_k, high=num_heads)
