"""What the grounding verdict does outside English: copied and changed facts in German and
Japanese, with the default (English-only) analysis model.

The cases are facts of the SQuAD v2 developer slice (Newton, Einstein, Aristotle, Galileo),
written by hand in German and Japanese: a context of two sentences, the sentence that holds the
fact copied verbatim (COPY), the same sentence with its number or name changed (EDIT), and a
paraphrase of the copied sentence (PARA, supported). Each is grounded at the defaults; the
script prints, per language and kind, how many are flagged and the mean score, and the share of
(COPY, EDIT) pairs ranked the right way.

    python -m benchmarks.grounding_languages --out docs/bench
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from benchmarks._common import machine, write
from rcstat import Grounder, load_model

# (context, copy, edit, paraphrase) per language
CASES: dict[str, list[tuple[str, str, str, str]]] = {
    "de": [
        (
            "Isaac Newton veröffentlichte 1687 die Principia. Darin beschrieb er die Gesetze "
            "der Bewegung.",
            "Isaac Newton veröffentlichte 1687 die Principia.",
            "Isaac Newton veröffentlichte 1712 die Principia.",
            "Die Principia erschienen 1687, verfasst von Isaac Newton.",
        ),
        (
            "Albert Einstein entwickelte 1915 die allgemeine Relativitätstheorie. Sie "
            "beschreibt die Gravitation als Krümmung der Raumzeit.",
            "Albert Einstein entwickelte 1915 die allgemeine Relativitätstheorie.",
            "Niels Bohr entwickelte 1915 die allgemeine Relativitätstheorie.",
            "Die allgemeine Relativitätstheorie stammt von Albert Einstein aus dem Jahr 1915.",
        ),
        (
            "Aristoteles lehrte, dass schwere Körper schneller fallen. Galileo Galilei "
            "widerlegte dies im 17. Jahrhundert.",
            "Galileo Galilei widerlegte dies im 17. Jahrhundert.",
            "Galileo Galilei widerlegte dies im 19. Jahrhundert.",
            "Im 17. Jahrhundert zeigte Galileo Galilei, dass dies falsch war.",
        ),
        (
            "Das Standardmodell kennt vier Grundkräfte. Die schwache Kraft wird durch "
            "W- und Z-Bosonen vermittelt.",
            "Das Standardmodell kennt vier Grundkräfte.",
            "Das Standardmodell kennt sieben Grundkräfte.",
            "Nach dem Standardmodell gibt es vier fundamentale Kräfte.",
        ),
    ],
    "ja": [
        (
            "アイザック・ニュートンは1687年にプリンキピアを出版した。その中で運動の法則を説明した。",
            "アイザック・ニュートンは1687年にプリンキピアを出版した。",
            "アイザック・ニュートンは1712年にプリンキピアを出版した。",
            "プリンキピアは1687年にニュートンによって出版された。",
        ),
        (
            "アインシュタインは1915年に一般相対性理論を完成させた。重力は時空の歪みとして説明される。",
            "アインシュタインは1915年に一般相対性理論を完成させた。",
            "アインシュタインは1932年に一般相対性理論を完成させた。",
            "一般相対性理論が完成したのは1915年で、アインシュタインによるものだ。",
        ),
        (
            "東京タワーは1958年に建てられました。高さは333メートルです。",
            "東京タワーは1958年に建てられました。",
            "東京タワーは1962年に建てられました。",
            "1958年に東京タワーは完成しました。",
        ),
        (
            "ガリレオは17世紀に落体の法則を示した。アリストテレスの考えは否定された。",
            "ガリレオは17世紀に落体の法則を示した。",
            "ガリレオは19世紀に落体の法則を示した。",
            "落体の法則を示したのは17世紀のガリレオである。",
        ),
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    model, tokenizer = load_model()
    rows = []
    for language, cases in CASES.items():
        grounder = Grounder(model, tokenizer, language=language)
        for i, (context, *responses) in enumerate(cases):
            for kind, response in zip(("copy", "edit", "para"), responses, strict=True):
                g = grounder.ground(context, response)
                weakest = g.sentences[0].weakest
                rows.append(
                    {
                        "language": language,
                        "case": i,
                        "kind": kind,
                        "score": g.score,
                        "flagged": not g.supported,
                        "sentences": len(g.sentences),
                        "weakest": None if weakest is None else weakest.text,
                        "threshold": g.threshold,
                    }
                )
    for language in CASES:
        mine = [r for r in rows if r["language"] == language]
        for kind in ("copy", "edit", "para"):
            part = [r for r in mine if r["kind"] == kind]
            print(
                f"{language} {kind}: {sum(r['flagged'] for r in part)}/{len(part)} flagged, "
                f"mean score {np.mean([r['score'] for r in part]):.3f}"
            )
        copies = [r["score"] for r in mine if r["kind"] == "copy"]
        edits = [r["score"] for r in mine if r["kind"] == "edit"]
        ranked = np.mean([c > e for c, e in zip(copies, edits, strict=True)])
        print(f"{language}: copy above edit in {ranked:.0%} of pairs")
    write(args.out, "grounding_languages", rows, machine("cpu"))


if __name__ == "__main__":
    main()
