"""GroundingOptions: every option of the grounder has one home, one flag of the same name and
one validator, and reaches the Grounder.

The oracle is the option itself: each one, set to a value other than its default on the real
``rcstat ground`` command line, must arrive unchanged in the checked arguments and then in the
Grounder built from them (read back from the attribute that uses it).
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from rcstat.cli import build_parser
from rcstat.cli.ground import GroundArgs
from rcstat.evaluation.bench.ground_pairs import PairsConfig
from rcstat.grounding import Grounder, HeadProfile
from rcstat.grounding.options import GroundingOptions
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer
from tests.test_cli_ground import _make_profile
from tests.test_grounding_detector import _detector


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("options")
    profile = _make_profile(folder / "profile.json", 0)
    detector = folder / "detector.json"
    _detector().save(detector)
    return {"profile": profile, "detector": detector, "probe": profile}  # the probe: any file


def _values(files: dict[str, Path]) -> dict[str, tuple[list[str], Any]]:
    """For every option: the flags that set it and the value it must then have."""
    return {
        "profile": (["--profile", str(files["profile"])], files["profile"]),
        "fraction": (["--fraction", "0.3"], 0.3),
        "quantile": (["--quantile", "0.4"], 0.4),
        "threshold": (["--threshold", "0.6"], 0.6),
        "probe": (["--probe", str(files["probe"])], files["probe"]),
        "top_k": (["--top-k", "3"], 3),
        "allow_special_tokens": (["--allow-special-tokens"], True),
        "language": (["--language", "de"], "de"),
        "max_tokens": (["--max-tokens", "200"], 200),
        "max_chars": (["--max-chars", "5000"], 5000),
        "max_response_tokens": (["--max-response-tokens", "100"], 100),
        "detector": (["--detector", str(files["detector"])], files["detector"]),
    }


def _ground(*flags: str) -> GroundArgs:
    ns = build_parser().parse_args(["ground", "--context", "a b.", "--response", "a.", *flags])
    args = GroundArgs.from_namespace(ns)
    assert isinstance(args, GroundArgs)
    return args


def test_every_option_has_its_flag_and_arrives(files: dict[str, Path]) -> None:
    values = _values(files)
    assert set(values) == {f.name for f in fields(GroundingOptions)}  # a new option needs a case
    defaults = _ground().options
    assert defaults == GroundingOptions()  # flags left out: the dataclass's defaults
    for name, (flags, want) in values.items():
        got = getattr(_ground(*flags).options, name)
        assert got == want != getattr(defaults, name), name
    assert _ground("--zero-shot").options.detector is False


def test_the_pairs_config_embeds_the_same_options(files: dict[str, Path], tmp_path: Path) -> None:
    from rcstat.cli.ground_pairs import from_namespace

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"context": "a b.", "response": "a."}\n', encoding="utf-8")
    flags = [f for name, (given, _) in _values(files).items() for f in given]
    ns = build_parser().parse_args(["ground", "--pairs", str(pairs), *flags])
    config = from_namespace(ns)
    assert isinstance(config, PairsConfig)
    assert config.options == _ground(*flags).options
    manifest = config.run_options()
    assert manifest["quantile"] == 0.4 and manifest["profile"] == str(files["profile"].resolve())
    assert "max_chars" not in manifest  # a limit on input changes no row
    assert manifest["language"] == config.options.language  # a code, not a path
    again = PairsConfig.from_dict({"data": str(pairs), "options": {"quantile": 0.4}})
    assert again.options.quantile == 0.4
    with pytest.raises(ValueError, match="unknown options"):
        PairsConfig.from_dict({"data": str(pairs), "options": {"quantlie": 0.4}})


def test_the_grounder_uses_every_option(files: dict[str, Path]) -> None:
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    options = GroundingOptions(
        profile=files["profile"],
        fraction=0.5,
        quantile=0.4,
        threshold=0.6,
        top_k=3,
        allow_special_tokens=True,
        language="de",
        max_tokens=200,
        max_chars=5000,
        max_response_tokens=100,
        detector=False,
    )
    grounder = Grounder(model, tok, options)
    profile = HeadProfile.load(files["profile"])
    assert grounder.options == options.checked()
    assert len(grounder.heads) == len(profile.heads(0.5)) and grounder.quantile == 0.4
    assert grounder.threshold == 0.6 and grounder.top_k == 3 and grounder.detector is None
    assert grounder.max_tokens == 200 and grounder.max_chars == 5000
    assert grounder.max_response_tokens == 100 and grounder.language == "de"
    assert grounder.measurer.allow_special_tokens and grounder.measurer.language == "de"
    by_name = Grounder(model, tok, options, top_k=4)  # a change over the options
    assert by_name.top_k == 4 and by_name.quantile == 0.4
    with pytest.raises(TypeError, match="unknown option"):
        Grounder(model, tok, options, quantlie=0.3)
    with pytest.raises(ValueError, match=r"top_k must be in \[0, 12\]"):
        Grounder(model, tok, options, top_k=13)  # the tiny model's 12 heads


@pytest.mark.parametrize(
    ("change", "flag_message", "python_message"),
    [
        ({"quantile": 0.0}, "--quantile must be in (0, 1)", "quantile must be in (0, 1)"),
        ({"top_k": -1}, "--top-k must be an integer in [0", "top_k must be an integer in [0"),
        ({"max_chars": 0}, "--max-chars must be", "max_chars must be"),
        ({"fraction": 1.5}, "--fraction must be in (0, 1]", "fraction must be in (0, 1]"),
    ],
)
def test_one_validator_names_the_option_as_the_caller_wrote_it(
    change: dict[str, Any], flag_message: str, python_message: str
) -> None:
    options = GroundingOptions(**change)
    with pytest.raises(ValueError) as flagged:
        options.checked(flags=True)
    assert str(flagged.value).startswith(flag_message)
    with pytest.raises(ValueError) as named:
        options.checked()
    assert str(named.value).startswith(python_message)
