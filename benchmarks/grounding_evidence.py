"""Is the evidence of a supported sentence the right context sentence? Checked on SQuAD v2,
where the sentence holding the gold answer is known.

For every answerable question of the slice, two responses are grounded after the question's
paragraph at the defaults: the gold answer itself, and the paragraph's sentence that holds it
(copied). The evidence is right when it is a context sentence that contains the answer. The
script prints the share right for the evidence `rcstat ground` shows (where the response's
words were copied from, else eq. 10) and for the eq. (10) attribution alone.

    python -m benchmarks.grounding_evidence --out docs/bench
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from benchmarks._common import machine, write
from rcstat import Grounder, load_model
from rcstat.attribution import split_sentences
from rcstat.data import default_path, load_squad_v2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="SQuAD v2 file (default: the slice)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    examples = [e for e in load_squad_v2(args.data or default_path("squad_v2")) if e.answers]
    model, tokenizer = load_model()
    grounder = Grounder(model, tokenizer)
    rows = []
    for e in examples:
        answer = e.answers[0]
        holding = [s for s in split_sentences(e.context) if answer in s.text]
        if not holding:
            continue
        for kind, response in (("answer", answer), ("sentence", holding[0].text)):
            measured = grounder.measurer.measure(e.context, response, e.question)
            g = grounder.score(measured)
            shown = g.sentences[0].support
            eq10 = measured.spans[int(np.argmax(measured.support[0]))]
            rows.append(
                {
                    "id": e.id,
                    "response": kind,
                    "shown_right": shown is not None and answer in shown.text,
                    "eq10_right": answer in eq10.text,
                    "supported": g.supported,
                }
            )
    for kind in ("answer", "sentence"):
        part = [r for r in rows if r["response"] == kind]
        print(
            f"{kind}: evidence right {np.mean([r['shown_right'] for r in part]):.2f}, eq. 10 "
            f"alone {np.mean([r['eq10_right'] for r in part]):.2f}, supported "
            f"{np.mean([r['supported'] for r in part]):.2f} ({len(part)} questions)"
        )
    write(args.out, "grounding_evidence", rows, machine("cpu"))


if __name__ == "__main__":
    main()
