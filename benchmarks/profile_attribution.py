"""Where one ``Attributor.attribute`` call spends its time (cProfile, top functions).

python -m benchmarks.profile_attribution --model llama-8b --model-dir DIR --device cuda
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

from benchmarks._common import sync
from benchmarks.bench_heads import build
from rcstat.attribution import Attributor
from rcstat.data import AttributionExample, load_dataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", choices=["default", "random", "llama-8b"])
    parser.add_argument("--model-dir", default=None)
    parser.add_argument("--dataset", default="verigran")
    parser.add_argument("--data", default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    model, tokenizer = build(args.model, args.model_dir, args.device)
    (example,) = load_dataset(args.dataset, args.data, limit=1)
    assert isinstance(example, AttributionExample)
    attributor = Attributor(model, tokenizer)
    units = [(u.start, u.end) for u in example.units]

    def once() -> None:
        attributor.attribute(list(example.chunks), example.question, example.answer, units=units)
        sync(args.device)

    once()  # warm-up
    profile = cProfile.Profile()
    profile.runcall(once)
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
