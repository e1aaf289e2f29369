"""The measurements of grounding: what one teacher-forced pass (and an optional prior pass) sees.

:class:`Measurer` teacher-forces a response (written by any model) after its context and an
instruction or question, through the chat template of an *analysis* model, and runs one
forward pass with the score capture active. From that pass it keeps, per response token and
head, the statistics of :mod:`.features`, the token's negative log-likelihood, each response
sentence's copy weight and eq. (10) attribution on the context's sentences; a second pass of the
question and the response alone gives each token's prior NLL. No scoring choice is made here
(:mod:`.grounder` scores). Only the context's tokens count as context: the template and the
instruction are neither context nor response.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rcstat.attribution import split_sentences
from rcstat.attribution.result import eq10_normalize
from rcstat.capture import attention_layout, capture_scores, softmax_params
from rcstat.capture.host import download_many, upload_many
from rcstat.checks import check_count
from rcstat.defaults import DEFAULT_BATCH_TOKENS, DEFAULT_LANGUAGE
from rcstat.generation import check_example, input_device
from rcstat.grounding.features import (
    PassExample,
    ResponseRows,
    grounding_reducer,
    heads_by_layer,
    query_positions,
)
from rcstat.grounding.measurement import Measurement, Prepared
from rcstat.grounding.pass_results import head_summaries, stacked, summed
from rcstat.grounding.passes import prompt_groups, span_sums, token_batches, word_matches
from rcstat.grounding.score import DEFAULT_QUANTILE
from rcstat.models.cache_argument import returned_cache, with_cache
from rcstat.segments import Segmented, chat_prompt_ids, segment_chat

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["DEFAULT_INSTRUCTION", "Measurer"]

#: The instruction placed after the context when no question is given.
DEFAULT_INSTRUCTION = "Write a response based on the text above."


class Measurer:
    """The forward pass of grounding, without any scoring choice (see :class:`Grounder`).

    Parameters
    ----------
    model, tokenizer
        The analysis model and its tokenizer.
    rc_heads
        Flat indices ``layer * heads + head`` of the heads whose per-token RC is computed
        (default: every head; the score needs only the profile's heads, a probe all).
    support_heads
        Flat indices of the heads that attribute each sentence to the context (eq. 10);
        none by default (no supporting spans).
    allow_special_tokens, language
        As in :class:`~rcstat.attribution.Attributor`.
    prior
        Also run the prior pass (:attr:`Measurement.prior_nll`; the benchmark's ``pmi_words``
        variant reads it, the verdicts do not).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        rc_heads: np.ndarray | None = None,
        support_heads: np.ndarray | None = None,
        allow_special_tokens: bool = False,
        language: str = DEFAULT_LANGUAGE,
        prior: bool = True,
    ) -> None:
        layout = attention_layout(model)
        total = layout.num_layers * layout.num_heads
        for name, chosen in (("rc_heads", rc_heads), ("support_heads", support_heads)):
            if chosen is not None and len(chosen) and not (0 <= min(chosen) <= max(chosen) < total):
                raise ValueError(f"{name} must be flat head indices in [0, {total})")
        self.model = model
        self.tokenizer = tokenizer
        self.language = language
        self.allow_special_tokens = allow_special_tokens
        self.prior = prior
        self._rc_heads = None if rc_heads is None else heads_by_layer(rc_heads, layout.num_heads)
        self._support_heads = (
            None if support_heads is None else heads_by_layer(support_heads, layout.num_heads)
        )
        self._softmax = softmax_params(model)
        self._heads = layout.num_heads

    def measure(
        self,
        context: str,
        response: str,
        question: str | None = None,
        *,
        example: Segmented | None = None,
    ) -> Measurement:
        """Run the forward pass and return the raw per-token statistics (no scoring);
        ``example``: the same texts already tokenised by :meth:`tokenize`."""
        return self.measure_batch([self.prepare(context, response, question, example=example)])[0]

    def prepare(
        self,
        context: str,
        response: str,
        question: str | None = None,
        *,
        example: Segmented | None = None,
    ) -> Prepared:
        """Check and tokenise one example for :meth:`measure_batch` (``ValueError`` or
        ``TypeError`` for texts that cannot be measured, before any forward pass)."""
        for label, text in (("context", context), ("response", response)):
            if not isinstance(text, str):
                raise TypeError(f"{label}: expected a str, got {type(text).__name__}")
            if not text.strip():
                raise ValueError(f"{label} is empty or whitespace only")
        if question is not None and (not isinstance(question, str) or not question.strip()):
            raise ValueError("question must be a non-empty string or None")
        if example is None:
            example = self.tokenize(context, response, question)
        check_example(self.model, example)
        rows = ResponseRows(example.token_span("context"), example.token_span("answer"))
        units = split_sentences(example.part_text("answer"), language=self.language)
        first = rows.response[0]
        unit_rows = tuple(
            (a - first, b - first)
            for a, b in example.token_spans("answer", [(u.start, u.end) for u in units])
        )
        return Prepared(
            example,
            PassExample(rows, unit_rows, word_matches(example, rows)),
            units,
            DEFAULT_INSTRUCTION if question is None else question,
            self.language,
        )

    def measure_many(
        self,
        prepared: Sequence[Prepared],
        *,
        batch_tokens: int | None = None,
        share_prompts: bool = True,
    ) -> list[Measurement]:
        """Measure many examples, several in each pass (:meth:`measure_batch`): sorted by
        length, in passes of at most ``batch_tokens`` tokens (examples × the pass's longest
        sequence; at least one example a pass). Default: :data:`DEFAULT_BATCH_TOKENS` on a
        GPU, one example a pass on a CPU (where batching saves nothing; there, examples that
        share their prompt share its pass unless ``share_prompts`` is False, see
        :meth:`passes`). Returns the measurements in the order of ``prepared``."""
        out: list[Measurement | None] = [None] * len(prepared)
        for batch, measured in self.passes(
            prepared, batch_tokens=batch_tokens, share_prompts=share_prompts
        ):
            for at, one in zip(batch, measured, strict=True):
                out[at] = one
        return [m for m in out if m is not None]

    def passes(
        self,
        prepared: Sequence[Prepared],
        *,
        batch_tokens: int | None = None,
        share_prompts: bool = True,
    ) -> Iterator[tuple[list[int], list[Measurement]]]:
        """:meth:`measure_many` one pass at a time: the indices of the examples of each
        pass and their measurements (each pass runs when the next item is asked for).

        With one example a pass (a budget of 1, the CPU default) and ``share_prompts``,
        examples whose prompts are the same tokens (one context and question, several
        responses) are measured together by :meth:`measure_shared`: the prompt's pass runs
        once for all of them (not for a model with sliding-window layers, see
        :attr:`keeps_every_key`)."""
        budget = self.batch_budget(batch_tokens)
        if budget == 1 and share_prompts and self.keeps_every_key:
            prompts = [p.example.input_ids[0][: p.passed.rows.first_row] for p in prepared]
            for group in prompt_groups(prompts):
                chosen = [prepared[k] for k in group]
                yield (
                    group,
                    (self.measure_shared(chosen) if len(group) > 1 else self.measure_batch(chosen)),
                )
            return
        for batch in token_batches([p.example.seq_len for p in prepared], budget):
            yield batch, self.measure_batch([prepared[k] for k in batch])

    def batch_budget(self, batch_tokens: int | None = None) -> int:
        """The most tokens of one pass of :meth:`measure_many`: ``batch_tokens`` checked, or
        by default :data:`DEFAULT_BATCH_TOKENS` on a GPU and 1 (one example a pass) on a
        CPU."""
        if batch_tokens is None:
            return DEFAULT_BATCH_TOKENS if input_device(self.model).type != "cpu" else 1
        return check_count("batch_tokens", batch_tokens)

    def measure_batch(
        self, prepared: Sequence[Prepared], *, meanwhile: Callable[[], object] | None = None
    ) -> list[Measurement]:
        """Measure several examples in one forward pass (and one prior pass).

        The sequences are right-padded to the longest: the padding comes after every real
        token, so causal attention keeps it out of their rows and each measurement equals the
        one of a pass over its sequence alone (up to floating-point rounding). A batch costs
        about one pass over ``len(prepared) x`` its longest sequence in memory; see
        :meth:`Grounder.ground_many` for batches sized by tokens.

        ``meanwhile()`` runs once the pass is queued on the device, before anything is read
        back: host work that needs no result runs while the device computes.
        """
        if not prepared:
            return []
        examples = [p.passed for p in prepared]
        reduce = self._reducer(examples)
        device = input_device(self.model)
        sequences = [p.example.input_ids[0] for p in prepared]  # [T] each
        rows = [e.rows.num_rows for e in examples]
        with (
            torch.no_grad(),
            capture_scores(self.model, reduce, query_positions=query_positions(examples)) as res,
        ):
            predicted = self._predict(sequences, rows, device)  # queued, not read
            if meanwhile is not None:
                meanwhile()
        priors = self._priors(prepared, sequences, rows, device)
        return self._measurements(prepared, res.ordered(), predicted, priors)

    def measure_shared(self, prepared: Sequence[Prepared]) -> list[Measurement]:
        """Measure examples whose tokens are the same up to their first captured row (one
        context and question, several responses): the prompt's pass runs once, without the
        capture, and each response's pass reads the prompt's keys and values from its cache.

        Every captured row, and every row whose logits give a response token's NLL, lies in
        the response's pass, and its keys are those of a pass over the whole sequence, so
        each measurement equals :meth:`measure_batch` of its example alone up to
        floating-point rounding. The prompt's tokens are passed once instead of once per
        response (RAGTruth holds six responses per context).
        """
        if not self.keeps_every_key:
            raise ValueError(
                "the model has sliding-window layers, whose cache keeps only the last keys: "
                "its prompt's pass cannot be shared (measure each example alone)"
            )
        split = prepared[0].passed.rows.first_row
        sequences = [p.example.input_ids[0] for p in prepared]  # [T] each
        prompt = sequences[0][:split]
        if any(
            p.passed.rows.first_row != split or not torch.equal(seq[:split], prompt)
            for p, seq in zip(prepared, sequences, strict=True)
        ):
            raise ValueError(
                "measure_shared needs examples whose tokens before the first captured row "
                "are the same (one prompt, several responses)"
            )
        device = input_device(self.model)
        with torch.no_grad():
            cache = returned_cache(  # before any pass: a plain copy waits for nothing
                self.model(prompt[None].to(device), use_cache=True, logits_to_keep=1)
            )
        out: list[Measurement] = []
        for p, seq in zip(prepared, sequences, strict=True):
            rows = p.passed.rows
            reduce = self._reducer([p.passed])
            end = rows.first_row + rows.num_rows
            with (
                torch.no_grad(),
                capture_scores(
                    self.model, reduce, query_start=rows.first_row, query_end=end
                ) as res,
            ):
                predicted = self._predict([seq], [rows.num_rows], device, past=cache, start=split)
            # the prompt's keys and values again, for the next response (a negative crop
            # removes that many tokens: the one form every transformers release takes)
            cache.crop(split - cache.get_seq_length())
            priors = self._priors([p], [seq], [rows.num_rows], device)
            out += self._measurements([p], res.ordered(), predicted, priors)
        return out

    def _reducer(
        self, examples: Sequence[PassExample]
    ) -> Callable[[int, torch.Tensor], dict[str, torch.Tensor]]:
        """The capture's reducer of a pass over ``examples`` (:func:`grounding_reducer`)."""
        return grounding_reducer(
            examples,
            self._softmax,
            rc_heads=self._rc_heads,
            support_heads=self._support_heads,
            device=input_device(self.model),
            heads=self._heads,
        )

    @property
    def keeps_every_key(self) -> bool:
        """Whether every layer attends to every past key (no sliding window): only then does
        a cache hold the keys of a whole prompt, and :meth:`measure_shared` apply."""
        return all(params.sliding_window is None for params in self._softmax.values())

    def _priors(
        self,
        prepared: Sequence[Prepared],
        sequences: Sequence[torch.Tensor],
        rows: Sequence[int],
        device: torch.device,
    ) -> list[np.ndarray | None]:
        """Each example's prior NLL (the question and the response alone), or Nones when
        the prior pass is off."""
        priors: list[np.ndarray | None] = [None] * len(prepared)
        if self.prior:
            alone = [
                torch.cat(
                    [
                        torch.tensor(
                            chat_prompt_ids(
                                self.tokenizer,
                                p.instruction,
                                allow_special_tokens=self.allow_special_tokens,
                            ),
                            dtype=ids.dtype,
                        ),
                        ids[slice(*p.passed.rows.response)],
                    ]
                )
                for p, ids in zip(prepared, sequences, strict=True)
            ]
            with torch.no_grad():
                predicted = self._predict(alone, rows, device).cpu().numpy()  # [B, 3, Gmax]
            priors = [predicted[b, 0, : r - 1] for b, r in enumerate(rows)]
        return priors

    def _measurements(
        self,
        prepared: Sequence[Prepared],
        layers: list[dict[str, torch.Tensor]],
        predicted: torch.Tensor,
        priors: list[np.ndarray | None],
    ) -> list[Measurement]:
        """The measurements of one pass's examples from its layers' reductions, its
        :meth:`_predict` and the priors, read from the device in one copy."""
        examples = [p.passed for p in prepared]
        k0 = min(e.rows.context[0] for e in examples)
        shape = (sum(len(e.units) for e in examples), max(e.rows.context[1] for e in examples) - k0)
        features = stacked(layers, "features", dim=1)  # [3, L, B, H, Gmax]
        counts = [p.passed.rows.num_rows - 1 for p in prepared]
        features, summaries, copy, support, copied, predicted = download_many(
            {
                "features": features,
                "summaries": head_summaries(features, counts, DEFAULT_QUANTILE),  # [B, 3, L, H]
                "copy": stacked(layers, "copy", dim=0),  # [L, B, H, Gmax]
                "support": summed(layers, "support", shape),  # [U, K] over layers and heads
                "copied": summed(layers, "copied", shape),  # [U, K]
                "predicted": predicted,  # [B, 3, Gmax]
            }
        ).values()
        host = predicted.numpy()
        out = []
        first_unit = 0
        for b, (p, prior) in enumerate(zip(prepared, priors, strict=True)):
            g = counts[b]
            nll, entropy, rank = host[b, 0, :g], host[b, 1, :g], host[b, 2, :g]
            mine = slice(first_unit, first_unit + len(p.passed.units))
            first_unit = mine.stop
            spans = p.span_keys - k0  # [S, 2] key ranges
            width = spans[:, 1] - spans[:, 0]
            # e(p_i) = mean of the span's key-level values; the copy weight summed over them
            totals = span_sums(support[mine].numpy(), spans) / width  # [U, S]
            copied_on = span_sums(copied[mine].numpy(), spans)  # [U, S]
            out.append(
                Measurement(
                    example=p.example,
                    features=features[:, :, b, :, :g].numpy(),
                    nll=nll,
                    units=p.units,
                    spans=p.spans,
                    support=eq10_normalize(totals)[0],
                    copy=copy[:, b, :, :g].numpy(),
                    prior_nll=prior,
                    copied=copied_on,
                    entropy=entropy,
                    rank=rank,
                    head_summary=summaries[b].numpy(),
                )
            )
        return out

    def tokenize(self, context: str, response: str, question: str | None = None) -> Segmented:
        """The example of one pass: the chat template around context and question (or
        :data:`DEFAULT_INSTRUCTION`), the response teacher-forced after it."""
        return segment_chat(
            self.tokenizer,
            context,
            DEFAULT_INSTRUCTION if question is None else question,
            response,
            allow_special_tokens=self.allow_special_tokens,
        )

    def _predict(
        self,
        sequences: Sequence[torch.Tensor],
        rows: Sequence[int],
        device: torch.device,
        *,
        past: Any = None,
        start: int = 0,
    ) -> torch.Tensor:
        """``[B, 3, Gmax]`` float64 where the pass runs (not read back): NLL, entropy and
        rank of the last ``rows[b] - 1`` tokens of each sequence ``[T_b]``, from one forward
        pass over them right-padded to one length: the output layer sees only the rows it
        needs (a hook picks them). With ``past`` (the cache of the first ``start`` tokens,
        all of them before every row needed), the pass runs over the tokens from ``start``."""
        lengths = [len(ids) for ids in sequences]
        width = max(rows) - 1
        ids = torch.full((len(sequences), max(lengths)), _pad_id(self.tokenizer), dtype=torch.long)
        picked = torch.empty(len(sequences), width, dtype=torch.long)  # [B, Gmax]
        for b, (seq, t, r) in enumerate(zip(sequences, lengths, rows, strict=True)):
            ids[b, :t] = seq
            picked[b] = t - r + torch.arange(width).clamp_max(r - 2)
        targets = ids.gather(1, (picked + 1).clamp_max(ids.shape[1] - 1))  # [B, Gmax]
        moved = upload_many(  # before the pass: nothing to wait for
            {"where": picked - start, "targets": targets, "ids": ids[:, start:]}, device, idle=True
        )
        where, targets, ids = moved["where"], moved["targets"], moved["ids"]
        head = self.model.get_output_embeddings()

        def pick(_: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
            hidden = args[0]  # [B, T, D]
            index = where.to(hidden.device)[..., None].expand(-1, -1, hidden.shape[-1])
            return (hidden.gather(1, index),)

        hook = head.register_forward_pre_hook(pick)
        try:
            logits = self.model(  # [B, Gmax, V]
                ids, **with_cache(self.model, past), use_cache=past is not None, logits_to_keep=0
            ).logits
        finally:
            hook.remove()
        targets = targets.to(logits.device)
        out = torch.zeros(len(sequences), 3, width, dtype=torch.float64, device=logits.device)
        for b, r in enumerate(rows):  # one sequence at a time: [G, V] float32 at most
            log_probs = logits[b, : r - 1].float().log_softmax(-1)  # [G, V]
            chosen = log_probs.gather(-1, targets[b, : r - 1, None])  # [G, 1]
            entropy = -(log_probs.exp() * log_probs).sum(-1)  # [G]
            rank = (log_probs > chosen).sum(-1)  # [G]
            out[b, :, : r - 1] = torch.stack([-chosen[:, 0], entropy, rank.to(entropy.dtype)])
        return out


def _pad_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """A token id to pad with (never read: the padding follows every real token)."""
    for found in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if found is not None:
            return int(found)
    return 0
