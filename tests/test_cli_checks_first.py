"""Every command refuses a bad option before its heavy imports (torch, transformers, pandas:
together about 8 s on two cores), with a message naming the flag.

Each case runs in a fresh interpreter and reports which heavy modules the refusal imported:
none may be.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_PROBE = """
import contextlib, io, json, sys
from rcstat import cli
err = io.StringIO()
with contextlib.redirect_stderr(err):
    code = cli.main(sys.argv[1:])
heavy = [m for m in ("torch", "transformers", "sklearn", "pandas") if m in sys.modules]
print(json.dumps({"code": code, "heavy": heavy, "error": err.getvalue().strip()}))
"""

CASES = [
    ("ground --context a --response b --threshold 2", "--threshold"),
    ("ground --context a --response b --quantile 0", "--quantile"),
    ("ground --context a --response b --max-chars 0", "--max-chars"),
    ("ground --context a --response b --batch-tokens 9", "--batch-tokens"),
    ("ground --pairs missing.jsonl", "--pairs missing.jsonl: no such file"),
    ("ground --pairs /", "--pairs /: a folder, not a file"),
    ("analyze --model / --context a --question b", "--model /: a folder without a config.json"),
    ("ground --model missing.gguf --context a --response b", "--model missing.gguf: no such"),
    ("analyze --model /no/such/model --context a --question b", "--model /no/such/model: no such"),
    ("analyze --model ./missing --context a --question b", "--model ./missing: no such"),
    ("ground --context a --response b --profile /", "--profile /: a folder, not a file"),
    ("analyze --context a --question b --max-new-tokens 0", "--max-new-tokens"),
    ("compress --context a --question b --ratio 2", "--ratio"),
    ("attribute --context a --question b --answer c --top-k 0", "--top-k"),
    ("attribute --context a --question b --answer c --top-k 271", "--top-k 271"),
    ("ground --context a --response b --top-k 999", "the model has 270 heads"),
    ("bench kv --dataset squad_v2 --ratios 2", "--ratios"),
    ("bench kv --dataset squad_v2 --ratios 0.5 --shard 1/2 --device cpu --n 0", "--n"),
    ("bench attribution --dataset quotesum --k 0", "--k"),
    ("bench grounding --dataset ragtruth --resamples 0", "--resamples"),
    ("bench grounding --dataset ragtruth --batch-tokens 0", "--batch-tokens"),
    ("heads --dataset squad_v2 --n 0", "--n"),
    ("ground-train --dataset ragtruth --weight x", "--weight"),
    # the configs of rcstat.commands.{analyze,attribute,compress} (their one check)
    ("analyze --prompt p --tau nan", "--tau"),
    ("analyze --prompt p --top 0", "--top"),
    ("analyze --prompt p --head -1.0", "--head -1.0"),
    ("analyze --context a --question b --prompt p", "(--prompt), not both"),
    ("analyze --generation g", "raw mode needs --prompt"),
    ("attribute --context a --question b --max-new-tokens 0", "--max-new-tokens"),
    ("attribute --context a --question b --span-score sum --statistic upper", "--span-score"),
    ("attribute --context a --question b --language xx", "--language"),
    ("attribute --context a --question b --granularity chunk", "--granularity chunk needs"),
    ("compress --context a --question b --threshold -1", "--threshold"),
    ("compress --context a --question b --window 0", "--window"),
    ("compress --context a --question b --window question", "--press-scope question"),
    ("compress --context a --question b --budget pooled", "--budget pooled needs --ratio"),
    ("compress --context a --question b --ratio 0.5 --floor 2", "--floor"),
    ("compress --context a --question b --sinks -1", "--sinks"),
    ("compress --context a --question b --max-new-tokens 0", "--max-new-tokens"),
    # the configs of rcstat.commands.{ground,ground_profile} and rcstat.demo (their one check)
    ("ground --context a", "ground needs --context (or --context-file) and --response"),
    ("ground --context a --response b --max-response-tokens 0", "--max-response-tokens"),
    ("ground --context a --response b --language xx", "--language"),
    ("ground-profile --fraction 0", "--fraction must be in (0, 1]"),
    ("ground-profile --threshold-quantile 1", "--threshold-quantile"),
    ("ground-profile --dataset ragtruth", "--dataset must be one of"),
    ("ground-profile --calibrate-on nosuch", "--calibrate-on: unknown dataset 'nosuch'"),
    ("demo --tau nan", "--tau must be a finite number"),
]


@pytest.mark.parametrize(("args", "flag"), CASES)
def test_a_bad_option_is_refused_before_the_heavy_imports(args: str, flag: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args.split()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["code"] == 2, found
    assert flag in found["error"].splitlines()[-1], found
    assert found["heavy"] == [], f"{args}: imported {found['heavy']} before refusing"
