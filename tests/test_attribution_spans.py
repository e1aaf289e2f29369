"""Sentence splitting, chunk joining and span location (rcstat.attribution.spans).

Sentence oracles are hand-written splits of short texts in English, Japanese, Chinese, Arabic,
Hebrew and a mix of scripts; hypothesis checks the offset invariants on text drawn from the
terminators, quotes and spaces of several scripts.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcstat.attribution.spans import (
    CHUNK_SEPARATOR,
    TextSpan,
    join_chunks,
    locate_spans,
    split_sentences,
)
from rcstat.defaults import DEFAULT_LANGUAGE

_TEXT = st.text(alphabet=st.sampled_from(list("ab .!?\n\"')")), max_size=60)
# Letters and terminators of several scripts, quotes, brackets, digits and odd whitespace.
_PIECES = [
    *"aZ3 .!?…\n\t\r\u3000\u00a0\"'”’)(「」『』“",
    *"日本語。！？，中文．",
    *"عربي؟،.",
    *"עברית",
    *("\u200f", "\u200e", "Dr.", "e.g.", "3.5", "U.S.", "\n\n", "\n \n", " I. "),
]
_MIXED = st.lists(st.sampled_from(_PIECES), max_size=40).map("".join)


def _check_invariants(text: str, spans: list[TextSpan]) -> None:
    """Ordered, non-overlapping, in bounds, exact, trimmed, covering every non-space char."""
    covered: set[int] = set()
    previous_end = 0
    for span in spans:
        assert 0 <= span.start < span.end <= len(text)
        assert span.text == text[span.start : span.end] == span.text.strip() != ""
        assert span.start >= previous_end
        previous_end = span.end
        covered.update(range(span.start, span.end))
    assert {i for i, c in enumerate(text) if not c.isspace()} <= covered


@settings(deadline=None)  # correctness, not timing: a loaded CI machine must not fail it
@given(_TEXT)
def test_sentences_are_ordered_trimmed_slices_covering_all_text(text: str) -> None:
    _check_invariants(text, split_sentences(text))


@settings(max_examples=300, deadline=None)
@given(_MIXED, st.sampled_from([DEFAULT_LANGUAGE, "ja", "zh", "ar", "he", "de", "xx"]))
def test_sentence_invariants_on_mixed_scripts(text: str, language: str) -> None:
    _check_invariants(text, split_sentences(text, language=language))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=80))
def test_sentence_invariants_on_any_text(text: str) -> None:
    _check_invariants(text, split_sentences(text))


@pytest.mark.parametrize(
    "text",
    [
        ".Z\u3000.Z本",  # found by hypothesis: sentencex's Rust code panicked on it
        "A.Z\u00a0.Zé",
        "Paid by J.\u2009K.\u00a0Rowling in 1997. It sold.",
    ],
)
@pytest.mark.parametrize("language", [DEFAULT_LANGUAGE, "de", "xx"])
def test_spaces_outside_ascii_after_an_initial_split_without_a_panic(
    text: str, language: str
) -> None:
    _check_invariants(text, split_sentences(text, language=language))


def test_a_no_break_space_splits_as_a_space() -> None:
    plain = _sentences("Dr. Smith paid 3.5 million. He left.")
    assert _sentences("Dr.\u00a0Smith paid 3.5\u00a0million. He\u00a0left.") == [
        t.replace("Dr. ", "Dr.\u00a0").replace("5 m", "5\u00a0m").replace("He l", "He\u00a0l")
        for t in plain
    ]


def _sentences(text: str, language: str = DEFAULT_LANGUAGE) -> list[str]:
    spans = split_sentences(text, language=language)
    _check_invariants(text, spans)
    return [s.text for s in spans]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # Abbreviations, titles and initialisms do not end a sentence.
        (
            "Dr. Smith met Mr. Jones at the U.S. office. They talked.",
            ["Dr. Smith met Mr. Jones at the U.S. office.", "They talked."],
        ),
        (
            "Some fruits, e.g. apples, keep well. Others, i.e. berries, do not.",
            ["Some fruits, e.g. apples, keep well.", "Others, i.e. berries, do not."],
        ),
        # Decimals, with and without a sentence end right after them.
        ("The value is 3.5. Next is 4.", ["The value is 3.5.", "Next is 4."]),
        ("It cost $3.50 in 2024. Cheap!", ["It cost $3.50 in 2024.", "Cheap!"]),
        # A closing quote after the full stop stays with its sentence.
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("She wrote “Done.” And slept.", ["She wrote “Done.”", "And slept."]),
        ("Is it? Yes! Fine.", ["Is it?", "Yes!", "Fine."]),
    ],
)
def test_english_sentences(text: str, want: list[str]) -> None:
    assert _sentences(text) == want


def test_japanese_sentences() -> None:
    text = "今日は晴れです。明日は雨でしょうか？わかりません！"
    want = ["今日は晴れです。", "明日は雨でしょうか？", "わかりません！"]
    assert _sentences(text) == want
    assert _sentences(text, language="ja") == want
    # The old English regex returned the whole paragraph as one sentence.
    assert split_sentences(text)[1] == TextSpan(8, 18, "明日は雨でしょうか？")


def test_chinese_sentences() -> None:
    text = "今天天气很好。明天会下雨吗？我不知道！他说：“好。”"
    want = ["今天天气很好。", "明天会下雨吗？", "我不知道！", "他说：“好。”"]
    assert _sentences(text) == want
    assert _sentences(text, language="zh") == want


@pytest.mark.parametrize("language", [DEFAULT_LANGUAGE, "ar"])
def test_arabic_sentences(language: str) -> None:
    text = "هذا نص عربي. هل هو جيد؟ نعم! الجملة الرابعة."
    want = ["هذا نص عربي.", "هل هو جيد؟", "نعم!", "الجملة الرابعة."]
    assert _sentences(text, language) == want


@pytest.mark.parametrize("language", [DEFAULT_LANGUAGE, "he"])
def test_hebrew_sentences(language: str) -> None:
    text = "זהו טקסט בעברית. האם הוא טוב? כן! משפט רביעי."
    want = ["זהו טקסט בעברית.", "האם הוא טוב?", "כן!", "משפט רביעי."]
    assert _sentences(text, language) == want


@pytest.mark.parametrize("language", [DEFAULT_LANGUAGE, "ja"])
def test_japanese_sentences_starting_with_a_digit_or_latin_letter(language: str) -> None:
    text = "東京タワーは1958年に建てられました。1962年に改装されました。NHKが使います！本当？"
    assert _sentences(text, language) == [
        "東京タワーは1958年に建てられました。",
        "1962年に改装されました。",
        "NHKが使います！",
        "本当？",
    ]
    # the half-width full stop, and closing quotes and brackets stay with their sentence
    assert _sentences("晴れ｡2日は雨「本当？」3日は（晴れ。）X", language) == [
        "晴れ｡",
        "2日は雨「本当？」",
        "3日は（晴れ。）",
        "X",
    ]


@pytest.mark.parametrize("language", [DEFAULT_LANGUAGE, "zh"])
def test_chinese_sentences_without_spaces(language: str) -> None:
    text = "北京是首都。2008年举办了奥运会！GDP增长了吗？？是的。”他说"
    assert _sentences(text, language) == [
        "北京是首都。",
        "2008年举办了奥运会！",
        "GDP增长了吗？？",
        "是的。”",
        "他说",
    ]


_CJK_PIECES = [*"日本語中文aZ3 .!?」”）\n", "1962", "。", "！", "？", "｡", "？！"]
_CJK_TEXT = st.lists(st.sampled_from(_CJK_PIECES), max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(_CJK_TEXT, st.sampled_from([DEFAULT_LANGUAGE, "ja", "zh", "de"]))
def test_a_cjk_mark_ends_its_sentence_before_any_character(text: str, language: str) -> None:
    spans = split_sentences(text, language=language)
    _check_invariants(text, spans)
    for span in spans:
        for i, char in enumerate(span.text):  # only marks and closers may follow a mark
            if char in "。！？｡":
                assert set(span.text[i + 1 :]) <= set("。！？｡」”）"), (text, span)


def test_mixed_scripts_and_marks() -> None:
    text = "English first. 日本語の文です。Another one? جملة عربية؟ \u200fמשפט. Last."
    assert _sentences(text) == [
        "English first.",
        "日本語の文です。",
        "Another one?",
        "جملة عربية؟",
        "\u200fמשפט.",
        "Last.",
    ]


def test_blank_lines_end_sentences_whatever_their_whitespace() -> None:
    text = "no end here\n \t\nnor here\r\n\r\nend. 次\n\n"
    assert _sentences(text) == ["no end here", "nor here", "end.", "次"]


def test_split_sentences_argument_errors() -> None:
    with pytest.raises(TypeError, match="text: expected a str"):
        split_sentences(b"bytes.")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="language: expected a str"):
        split_sentences("A.", language=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="language: is empty"):
        split_sentences("A.", language=" ")
    with pytest.raises(ValueError, match="character 3 is a lone surrogate"):
        split_sentences("a. \ud800 b.")
    assert _sentences("A cat. A dog.", "xx") == ["A cat.", "A dog."]  # unknown code: fallback


def test_sentence_rules_by_hand() -> None:
    text = 'He said "Stop." Then he left!\n\nNew part without end'
    assert [s.text for s in split_sentences(text)] == [
        'He said "Stop."',
        "Then he left!",
        "New part without end",
    ]
    assert split_sentences("3.14 is pi.")[0].text == "3.14 is pi."  # no space after the dot
    assert split_sentences("  \n ") == []


def test_join_chunks_offsets() -> None:
    text, spans = join_chunks(["alpha", "beta gamma", "delta"])
    assert text == CHUNK_SEPARATOR.join(["alpha", "beta gamma", "delta"])
    assert [text[s.start : s.end] for s in spans] == ["alpha", "beta gamma", "delta"]
    with pytest.raises(TypeError, match="single str"):
        join_chunks("alpha")
    with pytest.raises(TypeError, match="chunk 1: expected a str"):
        join_chunks(["a", 3])  # type: ignore[list-item]


def test_locate_spans_walks_repeated_phrases_left_to_right() -> None:
    text = "the cat and the cat and the dog"
    spans = locate_spans(text, ["the cat", "the cat", (28, 31)])
    assert [(s.start, s.end) for s in spans] == [(0, 7), (12, 19), (28, 31)]
    assert locate_spans(text, ["dog", "cat"])[1].start == 4  # falls back to the first match
    with pytest.raises(ValueError, match="no units given"):
        locate_spans(text, [], what="unit")
    with pytest.raises(ValueError, match="span 0 is an empty string"):
        locate_spans(text, [" "])
    with pytest.raises(ValueError, match=r"offsets \[5, 5\) are empty"):
        locate_spans(text, [(5, 5)])
