"""The inputs of the trained detector: per-token and per-response features of one pass.

Every feature comes from the one teacher-forced pass of :class:`~rcstat.grounding.Measurer`
(no prior pass) and from the texts themselves (docs/grounding.md, "The detector").

Token features (response token ``j``, written by the query row before it):

* the model's view: ``nll`` (capped at :data:`NLL_CAP` nats), ``entropy`` of its next-token
  distribution, ``log_rank`` (``log(1 + rank)`` of the token among the vocabulary);
* the token's word (``\\w+``; tokens of no word — spaces, punctuation — are ``punctuation``):
  ``novel`` (the context does not hold the word, :class:`~rcstat.grounding.lexicon.Lexicon`),
  ``bigram_novel`` (the word does not follow the previous one in the context), ``copied``
  (the word lies in a run of words copied from the context,
  :data:`~rcstat.grounding.lexicon.COPY_RUN`), ``number``,
  ``capital`` (starts with an upper-case letter), ``novel_fact`` (a novel number, or a novel
  capitalised word inside a sentence: a name — the facts a changed answer changes; a list
  marker such as ``3.`` at the start of a line is no fact), ``word_nll`` (the word's summed
  NLL, capped), ``word_copy`` (the largest ``copy`` weight of its tokens, summed over heads);
* the neighbourhood: the share of novel words within 2 and 5 words (``novel_near2``,
  ``novel_near5``), of novel bigrams within 3 (``bigram_novel_near3``), the mean capped word
  NLL within 3 (``word_nll_near3``);
* the whole response: ``position`` (``j / (G - 1)``), ``response_novel`` (its share of novel
  words), ``log_words``;
* per layer ``l``: ``lookback:L<l>`` (the Lookback Lens ratio averaged over the layer's heads),
  ``attention:L<l>`` (the mean log attention diagonal) and ``copy:L<l>`` (the ``copy`` weight
  summed over the layer's heads), from :mod:`.features`;
* per head ``h`` of layer ``l``: ``lookback:L<l>H<h>`` (its Lookback Lens ratio) and
  ``log_copy:L<l>H<h>`` (``log(copy + COPY_FLOOR)``, :data:`COPY_FLOOR`): the heads that look
  back at the context, or copy from it, differ from head to head, and a weight per head lets
  the token model find them (docs/grounding.md, "Every head's lookback and copy").

Response features: aggregates of the detector's token probabilities ``p_j`` (mean, largest,
mean of the 5 largest, largest mean over 5 and over 15 consecutive tokens, share above 0.5)
and of the texts: the share of the response's words and word bigrams that the context holds,
the share of its words in copied runs (``copied_share``), ``log(1 + novel facts)``, whether
the context is structured data (``structured_context``: a JSON record, whose faithful
overviews reword every key), ``log`` of the response's and the context's token counts, the
mean token NLL.
"""

from __future__ import annotations

import re

import numpy as np

from rcstat.grounding.lexicon import Lexicon, ResponseWord
from rcstat.grounding.measurement import Measurement

__all__ = [
    "COPY_FLOOR",
    "NLL_CAP",
    "RESPONSE_FEATURES",
    "context_tokens",
    "copied_share",
    "head_columns",
    "lexicon_words",
    "novel_facts",
    "response_features",
    "token_feature_names",
    "token_features",
]

#: NLL values above this many nats count as this many (a word the model finds impossible is as
#: unexpected as one it finds very unlikely; the cap keeps a linear model's scale sane).
NLL_CAP = 30.0
#: Added to a head's ``copy`` weight before its log: a head that copies nothing reads
#: ``log(1e-4)``, so that the feature stays finite and on a scale a linear model can weigh.
COPY_FLOOR = 1e-4
_NUMBER = re.compile(r"\d+")
#: Text before a word that makes it open a sentence, a line or a list item.
_OPENS = re.compile(r"(?:^|[.!?:;\n]\s*|(?:^|\n)\s*(?:\d+[.)]|[-*•])\s*)$")
#: A list marker: a number right after a line start, followed by "." or ")".
_MARKER_BEFORE = re.compile(r"(?:^|\n)\s*$")
_TEXT_FEATURES = (
    "nll",
    "entropy",
    "log_rank",
    "novel",
    "bigram_novel",
    "copied",
    "number",
    "capital",
    "novel_fact",
    "word_nll",
    "word_copy",
    "novel_near2",
    "novel_near5",
    "bigram_novel_near3",
    "word_nll_near3",
    "punctuation",
    "position",
    "response_novel",
    "log_words",
)
_LAYER_FEATURES = ("lookback", "attention", "copy")
_HEAD_FEATURES = ("lookback", "log_copy")
_HEAD_COLUMN = re.compile(r":L\d+H\d+$")
#: The response features, in the order of :func:`response_features`.
RESPONSE_FEATURES = (
    "p_mean",
    "p_max",
    "p_top5",
    "p_window5",
    "p_window15",
    "p_share_above_half",
    "words_known",
    "bigrams_known",
    "copied_share",
    "novel_facts",
    "structured_context",
    "log_tokens",
    "log_context_tokens",
    "mean_nll",
)


def token_feature_names(layers: int, heads: int) -> list[str]:
    """The names of :func:`token_features`' columns for a model of ``layers`` layers of
    ``heads`` heads."""
    layered = [f"{name}:L{layer}" for name in _LAYER_FEATURES for layer in range(layers)]
    per_head = [
        f"{name}:L{layer}H{head}"
        for name in _HEAD_FEATURES
        for layer in range(layers)
        for head in range(heads)
    ]
    return [*_TEXT_FEATURES, *layered, *per_head]


def head_columns(names: list[str] | tuple[str, ...]) -> np.ndarray:
    """``[F]`` bool: which of the token feature ``names`` are one head's own
    (:func:`token_feature_names`' ``name:L{layer}H{head}`` columns)."""
    return np.array([_HEAD_COLUMN.search(name) is not None for name in names], dtype=bool)


def token_features(
    measured: Measurement, words: list[ResponseWord]
) -> tuple[np.ndarray, np.ndarray]:
    """``[G, F]`` float64 token features (module notes) and ``[G]`` int64 the index into
    ``words`` of each token's word (``-1`` for a token of no word).

    Parameters
    ----------
    measured
        The pass over the response (its ``features`` need the lookback ratio and attention
        score of every head; ``rc`` is not read).
    words
        The response's words with their context matches
        (:meth:`~rcstat.grounding.lexicon.Lexicon.words_of`).
    """
    offsets = measured.token_spans()  # [G, 2]
    g = len(offsets)
    word_of = np.full(g, -1, dtype=np.int64)
    for k, w in enumerate(words):
        hit = (offsets[:, 1] > w.start) & (offsets[:, 0] < w.end) & (word_of < 0)
        word_of[hit] = k
    nll = np.minimum(np.asarray(measured.nll, dtype=np.float64), NLL_CAP)  # [G]
    copy_all = measured.copy.sum(axis=(0, 1)).astype(np.float64)  # [G]
    n = len(words)
    word_nll, word_copy = np.zeros(n), np.zeros(n)
    np.add.at(word_nll, word_of[word_of >= 0], nll[word_of >= 0])
    np.maximum.at(word_copy, word_of[word_of >= 0], copy_all[word_of >= 0])
    word_nll = np.minimum(word_nll, NLL_CAP)
    novel = np.array([not w.known for w in words], dtype=np.float64)  # [W]
    facts = novel_facts(measured.example.part_text("answer"), words)  # [W]
    bigram_novel = np.array([not w.bigram_known for w in words], dtype=np.float64)
    per_word = {
        "novel": novel,
        "bigram_novel": bigram_novel,
        "copied": np.array([w.copied for w in words], dtype=np.float64),
        "number": np.array([bool(_NUMBER.fullmatch(w.text)) for w in words], dtype=np.float64),
        "capital": np.array([w.text[:1].isupper() for w in words], dtype=np.float64),
        "novel_fact": facts.astype(np.float64),
        "word_nll": word_nll,
        "word_copy": word_copy,
        "novel_near2": _window_mean(novel, 2),
        "novel_near5": _window_mean(novel, 5),
        "bigram_novel_near3": _window_mean(bigram_novel, 3),
        "word_nll_near3": _window_mean(word_nll, 3),
    }
    inside = word_of >= 0
    columns = {
        "nll": nll,
        "entropy": np.asarray(measured.entropy, dtype=np.float64),
        "log_rank": np.log1p(np.asarray(measured.rank, dtype=np.float64)),
        "punctuation": (~inside).astype(np.float64),
        "position": np.arange(g) / max(g - 1, 1),
        "response_novel": np.full(g, novel.mean() if n else 0.0),
        "log_words": np.full(g, np.log1p(n)),
    }
    for name, values in per_word.items():
        column = np.zeros(g)
        column[inside] = values[word_of[inside]]
        columns[name] = column
    layers, heads = measured.copy.shape[:2]
    lookback = measured.features[1].mean(axis=1)  # [L, G]
    attention = measured.features[2].mean(axis=1)  # [L, G]
    copy = measured.copy.sum(axis=1)  # [L, G]
    text = np.stack([columns[name] for name in _TEXT_FEATURES], axis=1)  # [G, 19]
    layered = np.concatenate([lookback, attention, copy], axis=0).T  # [G, 3L]
    head_lookback = measured.features[1].reshape(layers * heads, g)  # [L·H, G]
    head_copy = np.log(measured.copy.reshape(layers * heads, g).astype(np.float64) + COPY_FLOOR)
    per_head = np.concatenate([head_lookback, head_copy], axis=0).T  # [G, 2·L·H]
    return np.hstack([text, layered.astype(np.float64), per_head]), word_of


def response_features(
    probability: np.ndarray,
    nll: np.ndarray,
    context_tokens: int,
    response: str,
    words: list[ResponseWord],
    structured: bool,
) -> np.ndarray:
    """``[R]`` the response features (module notes, order :data:`RESPONSE_FEATURES`) from
    the token probabilities ``probability`` ``[G]`` of the detector's token model, the tokens'
    NLL ``[G]``, the context's token count, the response, its words and whether the context
    is structured data (:attr:`~rcstat.grounding.lexicon.Lexicon.structured`)."""
    p = np.asarray(probability, dtype=np.float64)
    known = [w.known for w in words]
    pairs = [w.bigram_known for w in words[1:]]
    return np.array(
        [
            p.mean(),
            p.max(),
            np.sort(p)[-5:].mean(),
            _window_max(p, 5),
            _window_max(p, 15),
            (p > 0.5).mean(),
            float(np.mean(known)) if known else 0.0,
            float(np.mean(pairs)) if pairs else (float(known[0]) if known else 0.0),
            copied_share(words),
            np.log1p(float(novel_facts(response, words).sum())),
            float(structured),
            np.log(len(p)),
            np.log(max(context_tokens, 1)),
            float(np.minimum(nll, NLL_CAP).mean()),
        ]
    )


def copied_share(words: list[ResponseWord]) -> float:
    """The share of the response's words inside copied runs (0 for no word)."""
    return float(np.mean([w.copied for w in words])) if words else 0.0


def novel_facts(response: str, words: list[ResponseWord]) -> np.ndarray:
    """``[W]`` bool: the words that are novel facts (module notes) of ``response``.

    >>> from rcstat.grounding.lexicon import Lexicon
    >>> text = "It opened in 1925 in Paris.\\n2. Then Lyon had 3 more."
    >>> words = Lexicon("It opened in 1889 in Lyon.").words_of(text)
    >>> [w.text for w, fact in zip(words, novel_facts(text, words)) if fact]
    ['1925', 'Paris', '3']
    """
    out = np.zeros(len(words), dtype=bool)
    for k, w in enumerate(words):
        if w.known:
            continue
        before = response[: w.start]
        if _NUMBER.fullmatch(w.text):
            marker = response[w.end : w.end + 1] in (".", ")") and _MARKER_BEFORE.search(before)
            out[k] = not marker
        elif w.text[:1].isupper():
            out[k] = _OPENS.search(before) is None
    return out


def context_tokens(measured: Measurement) -> int:
    """How many tokens of the pass ``measured`` are context."""
    return int(np.diff(measured.example.token_span("context"))[0])


def lexicon_words(context: str, response: str) -> list[ResponseWord]:
    """The response's words marked by the context's :class:`Lexicon`."""
    return Lexicon(context).words_of(response)


def _window_mean(values: np.ndarray, radius: int) -> np.ndarray:
    """Each entry's mean over the entries within ``radius`` of it (fewer at the ends)."""
    if values.size == 0:
        return values
    sums = np.concatenate([[0.0], np.cumsum(values)])
    at = np.arange(values.size)
    lo, hi = np.maximum(at - radius, 0), np.minimum(at + radius + 1, values.size)
    return (sums[hi] - sums[lo]) / (hi - lo)


def _window_max(values: np.ndarray, width: int) -> float:
    """The largest mean of ``width`` consecutive entries (the mean of all when fewer)."""
    if values.size <= width:
        return float(values.mean())
    sums = np.concatenate([[0.0], np.cumsum(values)])
    return float((sums[width:] - sums[:-width]).max() / width)
