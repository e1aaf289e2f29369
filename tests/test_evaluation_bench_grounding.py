"""``rcstat.evaluation.bench.grounding`` as a library call on the tiny Llama: the job's manifest
options are derived from the config (the keys every existing run folder recorded), the summary
is a plain function of the run folder, and ``rcstat merge`` finds both through the registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rcstat.evaluation.bench.grounding import (
    KIND,
    GroundingConfig,
    GroundingJob,
    grounding_examples,
    run,
    summarize_run,
)
from rcstat.evaluation.bench.registry import job_kind, run_summary
from rcstat.evaluation.grounding_methods import BASELINES, VARIANTS
from tests._tiny_models import tiny_loader, tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer
from tests.test_cli_ground import _make_profile, _squad_file

#: The keys of a ``bench grounding`` manifest's options, in the order every run folder wrote
#: them: the dataset, the grounder's method, the config's own options, every grounding option
#: that changes results, and whether the zero-shot score gives the verdict.
MANIFEST_KEYS = [
    "dataset",
    "method",
    "data",
    "questionable",
    "task",
    "profile",
    "probe",
    "fraction",
    "quantile",
    "threshold",
    "top_k",
    "language",
    "allow_special_tokens",
    "max_tokens",
    "detector",
    "zero_shot",
]


@pytest.fixture
def config(tmp_path: Path) -> GroundingConfig:
    return GroundingConfig.from_dict(
        {
            "dataset": "squad-contrast",
            "data": str(_squad_file(tmp_path / "dev-v2.0.json")),
            "out": str(tmp_path / "bench"),
            "resamples": 20,
            "options": {"profile": str(_make_profile(tmp_path / "a.json", 0))},
        }
    )


def test_the_job_takes_config_model_tokenizer_and_items(config: GroundingConfig) -> None:
    items = grounding_examples(config)
    job = GroundingJob(config, tiny_model("llama"), make_tiny_tokenizer(), items)
    assert [item.key for item in job.items()] == [it.id for it in items]
    options = job.manifest_options()
    assert list(options) == MANIFEST_KEYS
    assert options["dataset"] == "squad-contrast" and options["method"] == job.grounder.method
    assert options["data"] == str(Path(config.data or "").resolve())
    assert options["profile"] == str(Path(str(config.options.profile)).resolve())
    assert (options["questionable"], options["task"], options["zero_shot"]) == (False, None, False)
    assert (options["quantile"], options["detector"], options["top_k"]) == (0.2, None, None)
    assert job.zero_shot is job.grounder  # no detector: the default verdict is zero-shot
    settings = job.summary_settings()
    assert settings == {
        "dataset": "squad-contrast",
        "model_name": "SmolLM2-135M-Instruct",
        "resamples": 20,
        "layers": 3,
        "heads": 4,
    }


def test_the_summary_is_a_function_of_the_run_folder(config: GroundingConfig) -> None:
    result = run(config, loader=tiny_loader)
    out = config.out
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["kind"] == KIND and list(manifest["options"]) == MANIFEST_KEYS
    assert result.report is not None and result.report["items"] == 4
    summaries = ("metrics.csv", "scores.csv", "errors.csv", "report.json")
    written = {name: (out / name).read_bytes() for name in summaries}
    assert list(json.loads(written["report.json"])["metrics"][0]) == [
        "method",
        "kind",
        "pairs",
        "supporting_higher",
        "ties",
        "supported_flagged",
        "unsupported_flagged",
    ]
    for name in summaries:
        (out / name).unlink()
    settings = {"dataset": "squad-contrast", "resamples": 20, "layers": 3, "heads": 4}
    again = summarize_run(out, {**settings, "model_name": "tiny"})
    assert {name: (out / name).read_bytes() for name in summaries} == written
    assert json.dumps(again.report) == json.dumps(result.report)  # NaN where undefined
    assert [row["method"] for row in again.report["metrics"]] == [*VARIANTS, *BASELINES]


def test_the_registry_names_the_job_and_its_summary() -> None:
    assert job_kind(KIND) is GroundingJob
    assert run_summary(KIND) is summarize_run
