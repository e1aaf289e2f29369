"""Changed facts that are neither numbers nor names: copied sentences and the same sentences
with one word replaced by its opposite (``rose`` → ``fell``, ``north`` → ``south``), written as
labelled pairs for `rcstat bench grounding --dataset jsonl` and `rcstat ground-train`.

Built by :func:`rcstat.grounding.swaps.opposite_pairs` from the documents of the named
datasets (their shared slices, or NAME:PATH), two pairs a document at most, seed 0; each pair's
two sentences share their document's group, and the edit's span is the replaced word.

    python -m benchmarks.opposite_swaps --from squad_v2,quotesum,verigran,faithbench \
        --out runs/opposites.jsonl
    rcstat bench grounding --dataset jsonl --data runs/opposites.jsonl --out runs/g_opposites
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import Counter
from pathlib import Path

from rcstat.data import load_dataset
from rcstat.grounding.calibrate import document_texts
from rcstat.grounding.swaps import opposite_pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="sources", default="squad_v2,quotesum,verigran,faithbench")
    parser.add_argument("--per-context", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/opposites.jsonl"))
    args = parser.parse_args()
    if args.out.exists():
        sys.exit(f"error: --out {args.out} exists; choose another file")
    texts = []
    for source in args.sources.split(","):
        name, _, path = source.partition(":")
        texts += document_texts(load_dataset(name, path or None))
    pairs = opposite_pairs(list(dict.fromkeys(texts)), per_context=args.per_context, seed=0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("x", encoding="utf-8") as f:
        for i, pair in enumerate(pairs):
            group = hashlib.sha256(pair.context.encode()).hexdigest()[:12]
            for suffix, response, label, spans in (
                ("copy", pair.copy, 0, []),
                ("edit", pair.edit, 1, [[pair.start, pair.end]]),
            ):
                row = {"id": f"opposite:{i}:{suffix}", "context": pair.context}
                row |= {"response": response, "label": label, "spans": spans, "group": group}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    words = Counter(f"{p.original.lower()}→{p.replacement.lower()}" for p in pairs)
    print(f"{len(pairs)} pairs from {len(set(texts))} documents written to {args.out}")
    print("most changed: " + ", ".join(f"{w} {n}" for w, n in words.most_common(10)))


if __name__ == "__main__":
    main()
