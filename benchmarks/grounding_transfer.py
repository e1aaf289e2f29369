"""The default verdict of `rcstat ground` on labelled datasets it was not trained on.

Every response of a grounding dataset (FaithBench and SummEdits by default: the shipped
detector was trained on RAGTruth and self-built copied/changed sentences only) is grounded at
the defaults (`Grounder.ground`: the shipped detector, no RC, no prior pass); the script prints
and writes, per dataset, the AUROC of `1 − score` with a 95 % interval (whole groups resampled),
the balanced accuracy and the shares of faithful and of unsupported responses flagged at the
verdict, and the same AUROC of the zero-shot word score and of the unigram and bigram overlap
from the same pass.

    python -m benchmarks.grounding_transfer --datasets faithbench,summedits --out docs/bench
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from benchmarks._common import machine, write
from rcstat import Grounder, load_model
from rcstat.data import load_dataset
from rcstat.evaluation.grounding_items import grounding_items
from rcstat.metrics import auroc, bootstrap_interval
from rcstat.metrics.thresholds import balanced_accuracy_of_predictions
from rcstat.progress import progress


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="faithbench,summedits")
    parser.add_argument("--n", type=int, default=None, help="first N responses of each")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    model, tokenizer = load_model()
    grounder = Grounder(model, tokenizer)
    zero_shot = grounder.zero_shot()
    rows, summary = [], []
    for name in args.datasets.split(","):
        items = grounding_items(load_dataset(name, limit=args.n))  # type: ignore[arg-type]
        part = []
        for item in progress(items, desc=name, unit="response"):
            measured = grounder.measurer.measure(item.context, item.response, item.question)
            g, z = grounder.score(measured), zero_shot.score(measured)
            part.append(
                {
                    "dataset": name,
                    "item": item.id,
                    "group": item.group,
                    "label": item.label,
                    "score": g.score,
                    "threshold": g.threshold,
                    "flagged": g.verdict == "unsupported",
                    "zero_shot": z.score,
                    "unigram_overlap": g.baselines["unigram_overlap"],
                    "overlap": g.baselines["overlap"],
                }
            )
        rows.extend(part)
        y = np.array([r["label"] for r in part])
        flagged = np.array([r["flagged"] for r in part])
        groups = [r["group"] for r in part]
        line = {"dataset": name, "responses": len(part), "unsupported": int(y.sum())}
        for method in ("score", "zero_shot", "unigram_overlap", "overlap"):
            hallucination = -np.array([r[method] for r in part], dtype=np.float64)
            line[f"auroc_{method}"] = auroc(hallucination, y)
            if method == "score":
                low, high = bootstrap_interval(auroc, hallucination, y, groups=groups)
                line["auroc_score_lo"], line["auroc_score_hi"] = low, high
        line["balanced_accuracy"] = balanced_accuracy_of_predictions(flagged, y)
        line["faithful_flagged"] = float(flagged[~y].mean())
        line["unsupported_flagged"] = float(flagged[y].mean())
        summary.append(line)
        print(
            f"{name}: AUROC {line['auroc_score']:.3f} [{line['auroc_score_lo']:.3f}, "
            f"{line['auroc_score_hi']:.3f}] (zero-shot {line['auroc_zero_shot']:.3f}, unigram "
            f"overlap {line['auroc_unigram_overlap']:.3f}, bigram {line['auroc_overlap']:.3f}); "
            f"at the verdict: balanced accuracy {line['balanced_accuracy']:.3f}, faithful "
            f"flagged {line['faithful_flagged']:.1%}, unsupported flagged "
            f"{line['unsupported_flagged']:.1%} ({len(part)} responses)"
        )
    meta = machine("cpu") | {"method": grounder.method["score"]}
    write(args.out, "grounding_transfer", summary, meta)
    write(args.out, "grounding_transfer_rows", rows, meta)


if __name__ == "__main__":
    main()
