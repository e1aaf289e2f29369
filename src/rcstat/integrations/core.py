"""The one scorer behind every framework's metric: a grounder built once, lazily.

:class:`GroundingScorer` holds either a ready :class:`~rcstat.grounding.Grounder` or what
builds one (a model name or path, a device, grounding options); the first score loads the model
(:func:`rcstat.models.load_model`: the embedded default when no name is given, offline) and
every later one reuses it, from any thread. Each framework's metric asks it for a
:class:`~rcstat.grounding.Grounding` and reports ``grounding.score`` unchanged (higher = more
supported, in ``[0, 1]``), ``grounding.threshold`` and a reason naming the unsupported spans
(:func:`reason`), so the frameworks differ only in how they pass the texts in and the result
out. :func:`require` imports a framework with an error that names rcstat's extra for it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any

from rcstat.grounding.options import GroundingOptions

if TYPE_CHECKING:
    from rcstat.grounding.grounder import Grounder
    from rcstat.grounding.result import Grounding

__all__ = [
    "EXTRAS",
    "GroundingScorer",
    "MissingFrameworkError",
    "join_contexts",
    "reason",
    "require",
    "succeeded",
]

#: rcstat's extra for each framework (``pip install "rcstat[<extra>]"``).
EXTRAS = {"ragas": "ragas", "deepeval": "deepeval", "trulens": "trulens"}

#: Between retrieved passages when a framework hands the context in as a list.
CONTEXT_SEPARATOR = "\n\n"


class MissingFrameworkError(ImportError):
    """The evaluation framework of an rcstat metric is not installed."""


def require(module: str, framework: str) -> ModuleType:
    """Import ``module`` of ``framework`` (a key of :data:`EXTRAS`), or raise
    :class:`MissingFrameworkError` with the install command of rcstat's extra for it.

    >>> require("math", "ragas").sqrt(4.0)
    2.0
    >>> require("no_such_module_here", "ragas")
    Traceback (most recent call last):
    ...
    rcstat.integrations.core.MissingFrameworkError: the ragas metric of rcstat needs ragas, which is not installed (no module named 'no_such_module_here'); install it with: pip install "rcstat[ragas]"
    """  # noqa: E501
    try:
        return import_module(module)
    except ModuleNotFoundError as err:
        missing = err.name or module
        if missing.partition(".")[0] != module.partition(".")[0]:
            raise  # the framework is there, one of its own dependencies is not: its error
        raise MissingFrameworkError(
            f"the {framework} metric of rcstat needs {framework}, which is not installed "
            f"(no module named {missing!r}); install it with: "
            f'pip install "rcstat[{EXTRAS[framework]}]"'
        ) from err


def join_contexts(context: str | Sequence[str]) -> str:
    """One context from a framework's retrieved passages (joined by a blank line), or the
    string itself.

    >>> join_contexts(["Paris is in France.", "It has a river."])
    'Paris is in France.\\n\\nIt has a river.'
    >>> join_contexts("one text")
    'one text'
    """
    if isinstance(context, str):
        return context
    passages = [str(passage) for passage in context]
    if not passages:
        raise ValueError("context is an empty list of passages; give at least one")
    return CONTEXT_SEPARATOR.join(passages)


def succeeded(grounding: Grounding) -> bool:
    """Whether a response passes: its score is at least its threshold, i.e. its verdict is not
    ``"unsupported"`` and some of it was checked (a NaN score never passes)."""
    return not math.isnan(grounding.score) and grounding.score >= grounding.threshold


def reason(grounding: Grounding, *, limit: int = 5) -> str:
    """One line for a framework's ``reason``: the verdict, score against threshold, and the
    unsupported spans' texts (the first ``limit``, then how many more).

    Examples
    --------
    ``"unsupported (score 0.214 < threshold 0.500): unsupported spans: 'in 1925'"`` or
    ``"supported (score 0.912 >= threshold 0.500): no unsupported span"``.
    """
    score, threshold = grounding.score, grounding.threshold
    relation = ">=" if succeeded(grounding) else "<"
    head = f"{grounding.verdict} (score {score:.3f} {relation} threshold {threshold:.3f})"
    if math.isnan(score):
        head = f"{grounding.verdict} (no sentence could be checked)"
    spans = [span.text for span in grounding.spans]
    if not spans:
        tail = "no unsupported span"
    else:
        shown = ", ".join(repr(text) for text in spans[:limit])
        more = f" and {len(spans) - limit} more" if len(spans) > limit else ""
        tail = f"unsupported spans: {shown}{more}"
    unverified = len(grounding.unverified)
    note = f"; {unverified} sentence(s) past the model's window unverified" if unverified else ""
    return f"{head}: {tail}{note}"


@dataclass
class GroundingScorer:
    """A :class:`~rcstat.grounding.Grounder`, given or built on first use, shared by a
    framework's metric.

    Parameters
    ----------
    grounder
        A ready grounder (its model, tokenizer and options); the other fields are then unused.
    model
        The analysis model for :func:`rcstat.models.load_model`: None for the embedded default
        (offline), a local path or a hub id.
    device
        Where to load it (``"cpu"``, ``"cuda"``…); None: the CPU.
    options
        Grounding options (threshold, detector, limits…; :class:`GroundingOptions`), or a
        mapping of them by name.

    Examples
    --------
    >>> scorer = GroundingScorer(options={"threshold": 0.4})  # nothing is loaded yet
    >>> scorer.options.threshold
    0.4
    """

    grounder: Grounder | None = None
    model: str | None = None
    device: str | None = None
    options: GroundingOptions | dict[str, Any] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _busy: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.options, dict):
            known = {f.name for f in fields(GroundingOptions)}
            unknown = sorted(set(self.options) - known)
            if unknown:
                names = ", ".join(sorted(known))
                raise TypeError(f"options got unknown name(s) {unknown}; the options: {names}")
            self.options = GroundingOptions(**self.options)
        if self.options is not None:
            self.options = self.options.checked()
        if self.grounder is not None and (self.model, self.device, self.options) != (
            None,
            None,
            None,
        ):
            raise ValueError(
                "give either a grounder or the model, device and options to build one, not both"
            )

    def get(self) -> Grounder:
        """The grounder, loading the model on the first call (once, whichever thread asks)."""
        if self.grounder is None:
            with self._lock:
                if self.grounder is None:
                    from rcstat.grounding.grounder import Grounder
                    from rcstat.models.load import load_model

                    model, tokenizer = load_model(self.model, device=self.device)
                    options = self.options
                    assert not isinstance(options, dict)  # converted in __post_init__
                    self.grounder = Grounder(model, tokenizer, options)
        return self.grounder

    def ground(
        self, context: str | Sequence[str], response: str, question: str | None = None
    ) -> Grounding:
        """``Grounder.ground`` of the joined context (:func:`join_contexts`); an empty question
        counts as none. One call at a time (the frameworks call from several threads; the
        model's capture is not shared between passes)."""
        grounder = self.get()
        with self._busy:
            return grounder.ground(join_contexts(context), response, question or None)
