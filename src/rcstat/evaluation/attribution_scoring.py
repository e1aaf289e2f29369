"""One example of the attribution benchmark (``rcstat bench attribution``,
:mod:`rcstat.evaluation.bench.attribution`): its prompt in a layout, its length in tokens, the
``k`` values of a run, and the rows that score every method from its single forward pass.

Every method reads the same :class:`~rcstat.attribution.Attribution` (one teacher-forced pass):
the ranked methods (:data:`RANKED_METHODS`) at each ``k``, the head set fixed over a dataset
(:data:`FIXED`), RC summed over every head (:data:`ALL`) and mean attention. A unit is correct
when its argmax chunk is the gold one (docs/definitions.md). These functions hold no state and
import neither torch nor transformers at import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rcstat.data import AttributionExample
from rcstat.evaluation.choices import LAYOUTS
from rcstat.runs.manifest import content_hash

if TYPE_CHECKING:
    from rcstat.attribution import Attribution

__all__ = [
    "ALL",
    "FIXED",
    "RANKED_METHODS",
    "example_hash",
    "parse_ks",
    "prompt_tokens",
    "render",
    "score_example",
]

#: The methods that rank the heads and keep the ``k`` first (or last): by RC of raw scores, or
#: of post-softmax weights (supplement Table 2).
RANKED_METHODS = ("top", "bottom", "top_post_softmax", "bottom_post_softmax")
#: The method of a head set fixed over a dataset (another run's rankings).
FIXED = "top_fixed"
#: RC summed over every head (and the ``k`` that means every head).
ALL = "all"


def render(
    example: AttributionExample, layout: str
) -> tuple[str | list[str], list[tuple[int, int]] | None]:
    """The context of ``example`` in ``layout`` and its candidate spans (character offsets;
    None: the chunks themselves, for ``plain``).

    >>> from rcstat.data import AttributionExample
    >>> ex = AttributionExample("x", "Q?", ("Red won.", "Blue lost."), "Red won.", (), "quotesum",
    ...                         {"titles": ("Final", "")})
    >>> render(ex, "numbered")
    ('[1] Final: Red won.\\n\\n[2] Blue lost.', [(0, 19), (21, 35)])
    >>> render(ex, "numbered-text")[1]
    [(11, 19), (25, 35)]
    """
    if layout == "plain":
        return list(example.chunks), None
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    titles = tuple(example.meta.get("titles", ())) if example.meta else ()
    entries, spans, start = [], [], 0
    for k, chunk in enumerate(example.chunks):
        title = titles[k].strip() if k < len(titles) and titles[k] else ""
        head = f"[{k + 1}] {title}: " if title else f"[{k + 1}] "
        entry = head + chunk
        # numbered: the whole entry; numbered-text: the chunk's own text only
        spans.append(
            (start, start + len(entry))
            if layout == "numbered"
            else (start + len(head), start + len(entry))
        )
        entries.append(entry)
        start += len(entry) + 2
    return "\n\n".join(entries), spans


def prompt_tokens(
    tokenizer: Any, example: AttributionExample, layout: str, *, question_first: bool = False
) -> int:
    """The prompt's length in tokens (chat template, rendered context and question)."""
    from rcstat.segments import segment_chat

    context, _ = render(example, layout)
    text = context if isinstance(context, str) else "\n\n".join(context)
    return segment_chat(tokenizer, text, example.question, question_first=question_first).prompt_len


def parse_ks(text: str, num_heads: int) -> list[int]:
    """``"1,2,5,all"`` → sorted distinct ``k`` values; ``all`` (and any ``k`` above the
    model's head count) means every head.

    >>> parse_ks("1,5,all,5", 270)
    [1, 5, 270]
    """
    ks: set[int] = set()
    for item in (v.strip() for v in text.split(",") if v.strip()):
        if item == ALL:
            ks.add(num_heads)
            continue
        k = int(item)
        if k < 1:
            raise ValueError(f"k must be positive, got {k}")
        ks.add(min(k, num_heads))
    if not ks:
        raise ValueError("no k given")
    return sorted(ks)


def score_example(
    result: Attribution,
    gold: Sequence[int],
    ks: Sequence[int],
    fixed: dict[int, list[tuple[int, int]]] | None = None,
) -> list[dict]:
    """Per unit and method, the predicted chunk and whether it is the gold one (``fixed``:
    the fixed head set of each ``k``)."""
    rows: list[dict[str, Any]] = []

    def add(method: str, k: int | None, attributed: Sequence[int | None]) -> None:
        for unit, (predicted, want) in enumerate(zip(attributed, gold, strict=True)):
            rows.append(
                {
                    "method": method,
                    "k": k,
                    "unit": unit,
                    "predicted": predicted,
                    "gold": want,
                    "correct": predicted == want,
                }
            )

    for method in RANKED_METHODS:
        for k in ks:
            add(method, k, result.scores_for(method, k)[1])  # type: ignore[arg-type]
    for k, heads in (fixed or {}).items():
        add(FIXED, k, result.scores_for_heads(heads)[1])
    add(ALL, result.num_heads, result.scores_for("all", None)[1])
    add("attention", result.num_heads, result.attention_scores()[1])
    return rows


def example_hash(example: AttributionExample) -> str:
    """The content hash of what determines an example's rows: chunks, question, answer and
    the annotated units with their gold chunks."""
    return content_hash(
        {
            "chunks": example.chunks,
            "question": example.question,
            "answer": example.answer,
            "units": [(u.start, u.end, u.gold_chunk) for u in example.units],
        }
    )
