"""Changed numbers and names in *reworded* answers: hand-written pairs of a short context, an
answer that rewords it faithfully and the same answer with one number or name changed, written
as labelled pairs for `rcstat bench grounding --dataset jsonl`.

The self-built copied/changed sentences (`rcstat ground-train --swaps-from`) quote their
context, so they test the copied kind; an answer that rewords its context is of the other kind
(docs/grounding.md, "Two kinds of response"), and these pairs test that kind on the change it
should catch. With ``--added`` the second answer of each pair is the faithful one with a claim
added that the context does not hold (RAGTruth's "baseless information", 100 of the 155
labelled spans of its slice): half name a new number or name, half add none. Twelve pairs
are a probe, not a benchmark: they show a behaviour, not a rate.

    python -m benchmarks.reworded_changes --out runs/reworded.jsonl
    rcstat bench grounding --dataset jsonl --data runs/reworded.jsonl --out runs/g_reworded
    python -m benchmarks.reworded_changes --added --out runs/added.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: (context, question, faithful rewording, the changed fact in it, its replacement)
PAIRS = [
    (
        "The Eiffel Tower was finished in 1889. It is 330 metres tall.",
        "When was the Eiffel Tower finished?",
        "It was finished in 1889 and is 330 metres tall.",
        "1889",
        "1925",
    ),
    (
        "The bridge opened in 1932 and carries six lanes of traffic across the river.",
        "When did the bridge open?",
        "Opened in 1932, the bridge carries six lanes.",
        "1932",
        "1935",
    ),
    (
        "The bridge opened in 1932 and carries six lanes of traffic across the river.",
        "How many lanes does the bridge carry?",
        "The bridge, which dates from 1932, has six traffic lanes.",
        "six",
        "eight",
    ),
    (
        "Marie Curie won the Nobel Prize in Physics in 1903 and in Chemistry in 1911.",
        "Which prizes did Curie win?",
        "She won the physics prize in 1903 and the chemistry prize in 1911.",
        "1911",
        "1912",
    ),
    (
        "The Amazon River is about 6,400 kilometres long and flows through Brazil, Peru and "
        "Colombia.",
        "How long is the Amazon?",
        "Running through Peru, Colombia and Brazil, the Amazon measures roughly 6,400 km.",
        "Peru",
        "Chile",
    ),
    (
        "The company reported revenue of 4.2 billion dollars in 2023, up from 3.8 billion in 2022.",
        "What was the revenue in 2023?",
        "Revenue grew to 4.2 billion dollars in 2023 from 3.8 billion a year earlier.",
        "4.2",
        "4.6",
    ),
    (
        "Lake Baikal in Siberia holds about 20 percent of the world's unfrozen fresh water.",
        "How much fresh water does Lake Baikal hold?",
        "Roughly a fifth of the planet's liquid fresh water, 20 percent, sits in Siberia's Lake "
        "Baikal.",
        "Siberia",
        "Mongolia",
    ),
    (
        "The museum, designed by Frank Gehry, opened in Bilbao in 1997.",
        "Who designed the museum?",
        "Frank Gehry designed the Bilbao museum, which opened its doors in 1997.",
        "Frank Gehry",
        "Renzo Piano",
    ),
    (
        "The train leaves Zurich at 8:15 and reaches Milan three hours and twenty minutes later.",
        "When does the train reach Milan?",
        "Leaving Zurich at 8:15, the train gets to Milan about 3 hours 20 minutes later.",
        "Zurich",
        "Geneva",
    ),
    (
        "Mount Kilimanjaro, in Tanzania, rises to 5,895 metres above sea level.",
        "How high is Kilimanjaro?",
        "Tanzania's Mount Kilimanjaro reaches a height of 5,895 metres.",
        "5,895",
        "5,995",
    ),
    (
        "The recipe needs 250 grams of flour, two eggs and 100 millilitres of milk.",
        "How much flour does the recipe need?",
        "You will need two eggs, 100 ml of milk and 250 g of flour.",
        "250",
        "300",
    ),
    (
        "Ada Lovelace wrote the first published algorithm for Charles Babbage's Analytical "
        "Engine in 1843.",
        "Who wrote the first algorithm?",
        "In 1843 Ada Lovelace published an algorithm for the Analytical Engine of Charles Babbage.",
        "Charles Babbage",
        "Alan Turing",
    ),
]


#: Per pair of :data:`PAIRS`, a claim added before the faithful answer's final period: the
#: first six name a number or name the context does not hold, the last six add none.
ADDED = [
    ", and Napoleon had it painted blue",
    ", and it was the first bridge in Europe to carry trams",
    ", and it cost 90 million dollars",
    "; she shared the first with Albert Einstein",
    ", and its mouth lies near Lima",
    ", after a loss in 2021",
    ", and its water is the warmest of any lake",
    ", and it is the most visited museum in the country",
    ", with a stop on the way",
    ", and its summit is often free of snow",
    ", which must be whisked for ten minutes",
    ", and it was never run on a machine",
]


def rows(added: bool = False) -> list[dict[str, object]]:
    """Two labelled pairs a context: the faithful rewording (label 0) and the changed one
    (label 1, its span the replacement), or with ``added`` the faithful one with the claim of
    :data:`ADDED` (label 1, its span the claim); both of one group."""
    out: list[dict[str, object]] = []
    for k, (context, question, faithful, old, new) in enumerate(PAIRS):
        assert faithful.count(old) == 1 and faithful.endswith("."), (faithful, old)
        if added:
            changed, marked = faithful[:-1] + ADDED[k] + ".", ADDED[k].lstrip(",; ")
        else:
            changed, marked = faithful.replace(old, new), new
        start = changed.index(marked)
        group = f"{'added' if added else 'reworded'}:{k}"
        copy = {
            "id": f"{group}:copy",
            "context": context,
            "question": question,
            "response": faithful,
            "label": 0,
            "spans": [],
            "group": group,
        }
        spans = [[start, start + len(marked)]]
        out += [
            copy,
            copy | {"id": f"{group}:edit", "response": changed, "label": 1, "spans": spans},
        ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/reworded.jsonl"))
    parser.add_argument(
        "--added", action="store_true", help="add an unsupported claim instead of changing a fact"
    )
    args = parser.parse_args()
    if args.out.exists():
        sys.exit(f"error: --out {args.out} exists; choose another file")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(row, ensure_ascii=False) for row in rows(args.added)]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(lines)} labelled responses written to {args.out}")


if __name__ == "__main__":
    main()
