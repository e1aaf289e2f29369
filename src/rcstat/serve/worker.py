"""What the worker thread of the service does: it loads the model, owns it, and answers
batches of jobs (:class:`~rcstat.serve.batcher.Job`).

A batch of ``ground`` jobs (one set of options) is one
:meth:`~rcstat.grounding.Grounder.ground_many` call: each answer is
:meth:`GroundResult.document() <rcstat.commands.ground.GroundResult.document>`, the object of
``rcstat ground --json``; a pair that the grounder refuses (a response longer than
``max_response_tokens``…) gets its ``ValueError``, before any forward pass. An ``attribute``
job runs an :class:`~rcstat.attribution.Attributor` (one pass) and answers
:func:`attribution_document`. Grounders and attributors are kept per set of options (the most
recent :data:`KEEP`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rcstat.commands.attribute import AttributeConfig
from rcstat.commands.ground import GroundResult
from rcstat.evaluation.bench.common import load_for
from rcstat.grounding.options import GroundingOptions
from rcstat.serve.batcher import Job
from rcstat.serve.config import ServeConfig

if TYPE_CHECKING:
    from rcstat.attribution import Attribution
    from rcstat.evaluation.bench.common import Loader

__all__ = ["KEEP", "OptionsKey", "Worker", "attribution_document"]

#: Grounders (and attributors) kept, one per set of options, the least recently used dropped.
KEEP = 8


def attribution_document(attribution: Attribution) -> dict[str, Any]:
    """The JSON object of ``POST /v1/attribute``: :meth:`Attribution.to_dict` (the context's
    candidate ``spans``, every response sentence — a ``unit`` — with its ``scores`` over the
    spans and the index of its ``attributed`` span), each unit with its ``best`` span
    (``start``, ``end``, ``text`` in the context, ``score``; None when no span is attributed).
    """
    document = attribution.to_dict()
    spans = document["spans"]
    for unit in document["units"]:
        best = unit["attributed"]
        unit["best"] = None if best is None else {**spans[best], "score": unit["scores"][best]}
    return document


class OptionsKey:
    """``options`` as a key of a batch and of the kept grounders: equal when every field is
    equal, objects (a :class:`~rcstat.grounding.HeadProfile` passed in Python, unhashable)
    compared by identity."""

    def __init__(self, options: GroundingOptions) -> None:
        self.options = options
        self._fields = tuple((f.name, _hashable(getattr(options, f.name))) for f in fields(options))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OptionsKey) and self._fields == other._fields

    def __hash__(self) -> int:
        return hash(self._fields)


def _described(options: GroundingOptions) -> dict[str, Any]:
    """The options as JSON: numbers, texts and flags as they are, files as their paths, an
    object passed in Python as its type's name."""
    out: dict[str, Any] = {}
    for f in fields(options):
        value = getattr(options, f.name)
        if value is not None and not isinstance(value, (bool, int, float, str)):
            value = str(value) if isinstance(value, Path) else type(value).__name__
        out[f.name] = value
    return out


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return value


class _Kept(OrderedDict[Any, Any]):
    """A small least-recently-used map."""

    def get_or_make(self, key: Any, make: Callable[[], Any]) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        value = make()
        self[key] = value
        while len(self) > KEEP:
            self.popitem(last=False)
        return value


class Worker:
    """The model and what answers jobs on it (used on the batcher's one thread only).

    Parameters
    ----------
    config
        The service's options (the model, its devices, the grounder's base options, the
        tokens of one pass).
    loader
        ``loader(model, devices)`` → ``(model, tokenizer)`` (default: :func:`rcstat.load_model`).
    """

    def __init__(self, config: ServeConfig, loader: Loader | None = None) -> None:
        self.config = config
        self._loader = loader
        self.model: Any = None
        self.tokenizer: Any = None
        self.info: dict[str, Any] = {}
        self._grounders = _Kept()
        self._attributors = _Kept()

    def load(self) -> None:
        """Load the model and the grounder of the base options (a profile of another shape
        than the model fails here, before the service says it is ready)."""
        self.model, self.tokenizer = load_for(self.config, self._loader)
        grounder = self.grounder(self.config.options)
        self.info = {
            "model": grounder.model_name,
            "profile": {
                "model": grounder.profile.model,
                "source": grounder.profile.source,
                "shape": list(grounder.profile.shape),
            },
            "threshold": grounder.threshold,
            "method": grounder.method,
            "options": _described(self.config.options),
        }

    def grounder(self, options: GroundingOptions) -> Any:
        """The :class:`~rcstat.grounding.Grounder` of ``options`` (made once)."""
        from rcstat.grounding.grounder import Grounder

        return self._grounders.get_or_make(
            OptionsKey(options), lambda: Grounder(self.model, self.tokenizer, options)
        )

    def attributor(self, config: AttributeConfig) -> Any:
        """The :class:`~rcstat.attribution.Attributor` of ``config``'s options (made once)."""
        from rcstat.attribution import Attributor
        from rcstat.defaults import resolve_span_score

        key = attributor_key(config)
        span_score = resolve_span_score(
            config.span_score, config.statistic, names=("--span-score", "--statistic")
        )
        return self._attributors.get_or_make(
            key,
            lambda: Attributor(
                self.model,
                self.tokenizer,
                top_k=config.top_k,
                head_ranking=config.ranking,  # type: ignore[arg-type]
                statistic=config.statistic,  # type: ignore[arg-type]
                language=config.language,
                span_score=span_score,
            ),
        )

    def work(self, jobs: Sequence[Job]) -> None:
        """Answer ``jobs`` (one kind, one key): complete each job's future."""
        if jobs[0].kind == "ground":
            self._ground(jobs)
        else:
            for job in jobs:
                self._attribute(job)

    def _ground(self, jobs: Sequence[Job]) -> None:
        grounder = self.grounder(jobs[0].key.options)  # an OptionsKey
        pairs = [job.data for job in jobs]
        results = grounder.ground_many(pairs, batch_tokens=self.config.batch_tokens)
        for job, result in zip(jobs, results, strict=True):
            if isinstance(result, ValueError):
                job.future.set_exception(result)
            else:
                job.future.set_result(GroundResult(result).document())

    def _attribute(self, job: Job) -> None:
        config: AttributeConfig = job.data[0]
        top_k_given: bool = job.data[1]  # whether the request set top_k
        try:
            if not top_k_given:  # the default, at most the model's heads
                from rcstat.capture import attention_layout

                layout = attention_layout(self.model)
                config = replace(
                    config, top_k=min(config.top_k, layout.num_layers * layout.num_heads)
                )
            attributor = self.attributor(config)
            assert isinstance(config.context, str) and config.question is not None  # checked
            attribution = attributor.attribute(
                config.context,
                config.question,
                config.answer,
                granularity=config.granularity,
            )
        except ValueError as err:
            job.future.set_exception(err)
            return
        job.future.set_result(attribution_document(attribution))


def attributor_key(config: AttributeConfig) -> tuple[Any, ...]:
    """What makes one attributor: the options of ``config`` that its constructor takes."""
    return (config.top_k, config.ranking, config.statistic, config.span_score, config.language)
