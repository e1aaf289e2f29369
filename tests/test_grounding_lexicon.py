"""rcstat.grounding.lexicon: which response words a context holds (hand-computed cases for
structured data, clock times, compounds, bigrams and copied runs) and a hypothesis property:
a run of a plain-text context's words, taken as the response, is known and copied word by
word; words from a disjoint alphabet are neither."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcstat.grounding.lexicon import COPY_RUN, Lexicon, ResponseWord


def _known(context: str, response: str) -> dict[str, bool]:
    return {w.text: w.known for w in Lexicon(context).words_of(response)}


# ------------------------------------------------------------------------ structured data

BUSINESS = {
    "name": "Patty's Diner",
    "description": "Come back.\n\nPatty",
    "attributes": {
        "OutdoorSeating": True,
        "BusinessAcceptsCreditCards": False,
        "WiFi": "free",
        "HTTPServer": None,
        "restaurants_price_range2": 2,
    },
    "categories": ["Breakfast & Brunch", "Diners"],
    "business_stars": 4.5,
}


def test_a_json_context_is_read_as_keys_and_values() -> None:
    lex = Lexicon(json.dumps(BUSINESS))
    assert lex.structured
    # keys split at case changes and underscores, and the key joined
    for word in ("outdoor", "seating", "outdoorseating", "business", "accepts", "credit"):
        assert lex.known(word), word
    for word in ("cards", "wifi", "wi", "fi", "http", "server", "httpserver", "restaurants"):
        assert lex.known(word), word
    assert lex.known("range") and lex.known("restaurantspricerange2")
    # string values with their escapes decoded: "\n\nPatty" gives patty, not npatty
    assert lex.known("patty") and lex.known("back") and not lex.known("npatty")
    assert lex.known("PATTY")  # any case
    # booleans as yes / no (and true / false), numbers as digit runs, lists item by item
    assert lex.known("yes") and lex.known("no") and lex.known("true") and lex.known("false")
    assert lex.known("4") and lex.known("5") and lex.known("brunch") and lex.known("diners")
    # null gives nothing; JSON punctuation is no word
    assert not lex.known("null") and not lex.known("none")


def test_booleans_and_the_raw_escape_words() -> None:
    lex = Lexicon('{"Parking": false}')
    assert lex.known("no") and lex.known("false") and lex.known("parking")
    # every structured context knows yes and no (a listing's answer to its own keys)
    assert lex.known("yes")
    plain = Lexicon("Parking: false. Come back.\\n\\nPatty")  # not JSON: raw text
    assert not plain.structured
    assert not plain.known("yes") and not plain.known("no")
    assert plain.known("npatty") and not plain.known("patty")


@pytest.mark.parametrize(
    "context",
    ["[1] The bridge was built.", "{not json", '"a JSON string"', "42", "   ", "[1, 2"],
)
def test_what_is_not_structured(context: str) -> None:
    assert not Lexicon(context).structured


def test_a_json_array_is_structured_and_whitespace_is_allowed() -> None:
    lex = Lexicon('  \n[{"CoatCheck": true}, "Open Late"]')
    assert lex.structured
    assert lex.known("coat") and lex.known("check") and lex.known("late") and lex.known("yes")


def test_the_docstring_example_by_hand() -> None:
    lex = Lexicon('{"hours": {"Monday": "17:00-21:00"}, "OutdoorSeating": true}')
    words = lex.words_of("Open 5 pm to 9 pm, with outdoor seating.")
    assert [(w.text, w.known) for w in words] == [
        ("Open", False),
        ("5", True),
        ("pm", True),
        ("to", False),
        ("9", True),
        ("pm", True),
        ("with", False),
        ("outdoor", True),
        ("seating", True),
    ]


# ---------------------------------------------------------------------------- clock times


@pytest.mark.parametrize(
    ("context", "known", "unknown"),
    [
        ("Open 17:00-21:00 daily.", ["5", "9", "pm", "17", "21", "00", "0"], ["am", "noon"]),
        ("Open 5:00 pm to 9:30 p.m.", ["17", "21", "30", "pm", "5", "9"], ["am"]),
        ("From 9:05 am.", ["9", "09", "05", "5", "am"], ["pm", "21"]),
        ("Lunch at 12:00.", ["12", "noon", "pm"], ["midnight", "am"]),
        ("Closes at 0:00.", ["12", "midnight", "am"], ["noon", "pm"]),
        ("Closes at 24:00.", ["0", "12", "midnight", "am"], ["noon"]),
        ("Closes at 12:00 am.", ["midnight", "0", "am"], ["noon"]),
        ("Opens at 12:30 pm.", ["12", "30", "pm"], ["noon", "am"]),
        ("Opens at 17:0.", ["5", "pm", "00"], ["am"]),
        # not clock times: an hour past 24, minutes past 59, a longer run of colons
        ("Ratio 25:00 and 9:75.", ["25", "00", "9", "75"], ["1", "pm", "am", "21"]),
        ("At 10:30:15 sharp.", ["10", "30", "15"], ["am", "pm", "22"]),
    ],
)
def test_clock_times_in_both_clocks(context: str, known: list[str], unknown: list[str]) -> None:
    lex = Lexicon(context)
    for word in known:
        assert lex.known(word), (context, word)
    for word in unknown:
        assert not lex.known(word), (context, word)


def test_times_inside_structured_data() -> None:
    context = json.dumps({"hours": {"Friday": "11:0-23:30", "Sunday": "12:0-0:0"}})
    assert _known(context, "Open 11 am to 11:30 pm, Sunday noon to midnight.") == {
        "Open": False,
        "11": True,
        "am": True,
        "to": False,
        "30": True,
        "pm": True,
        "Sunday": True,
        "noon": True,
        "midnight": True,
    }


# ------------------------------------------------------------------------------ compounds


@pytest.mark.parametrize(
    ("context", "response", "known"),
    [
        ("Free WiFi in the lobby.", "Wi-Fi", [True, True]),
        ('{"WiFi": "free"}', "wi-fi", [True, True]),
        ("Send an email.", "e-mail", [True, True]),
        ("Free WiFi.", "Wi - Fi", [False, False]),  # not one hyphenated word
        ("Free WiFi.", "Wi-Fo", [False, False]),
        ("A well known place.", "well-known", [True, True]),  # each part known
        ("A known place.", "well-known", [False, True]),
    ],
)
def test_hyphenated_compounds(context: str, response: str, known: list[bool]) -> None:
    assert [w.known for w in Lexicon(context).words_of(response)] == known


# ------------------------------------------------------------------------- bigrams and runs


def test_bigrams_by_hand() -> None:
    words = Lexicon("The red bridge crosses the river.").words_of("The RED car, the river")
    assert [(w.text, w.known, w.bigram_known) for w in words] == [
        ("The", True, False),  # the first word has no bigram
        ("RED", True, True),
        ("car", False, False),
        ("the", True, False),  # "car the" is not in the context
        ("river", True, True),
    ]


def test_copied_runs_by_hand() -> None:
    assert COPY_RUN == 4
    lex = Lexicon("the bridge was built in 1889 by engineers")
    words = lex.words_of("Yes, the Bridge was built in 1925 by engineers.")
    assert [(w.text, w.copied) for w in words] == [
        ("Yes", False),
        ("the", True),
        ("Bridge", True),
        ("was", True),
        ("built", True),
        ("in", True),
        ("1925", False),  # the changed fact breaks the run
        ("by", False),  # "by engineers" alone: two words, not four
        ("engineers", False),
    ]
    # three words in a row are not a run; punctuation between words does not break one
    assert [w.copied for w in lex.words_of("the bridge was")] == [False] * 3
    assert [w.copied for w in lex.words_of("The bridge; was, built!")] == [True] * 4


def test_response_words_index_the_response() -> None:
    response = "  Wi-Fi: 5 pm, café!"
    words = Lexicon("café WiFi 17:00").words_of(response)
    assert [w.text for w in words] == ["Wi", "Fi", "5", "pm", "café"]
    for w in words:
        assert isinstance(w, ResponseWord) and response[w.start : w.end] == w.text
    assert all(w.known for w in words)
    assert Lexicon("anything").words_of("?!  ...") == []


# ----------------------------------------------------------------------------- properties

_WORDS = st.text(alphabet="abcdefghijklmnoéßABCXYZ0123456789", min_size=1, max_size=6)
_SEPARATORS = st.sampled_from([" ", ", ", ". ", "\n", " (", ") ", "; ", "  "])


@settings(max_examples=150, deadline=None)
@given(
    words=st.lists(_WORDS, min_size=COPY_RUN, max_size=20),
    data=st.data(),
)
def test_a_run_of_context_words_is_known_and_copied(words: list[str], data: st.DataObject) -> None:
    gaps = data.draw(st.lists(_SEPARATORS, min_size=len(words), max_size=len(words)))
    context = "".join(w + g for w, g in zip(words, gaps, strict=True))
    starts, position = [], 0
    for w, g in zip(words, gaps, strict=True):
        starts.append(position)
        position += len(w) + len(g)
    first = data.draw(st.integers(0, len(words) - COPY_RUN))
    last = data.draw(st.integers(first + COPY_RUN, len(words)))  # exclusive
    response = context[starts[first] : starts[last - 1] + len(words[last - 1])]
    found = Lexicon(context).words_of(response)
    assert [w.text for w in found] == words[first:last]
    assert all(w.known and w.copied for w in found)
    assert all(w.bigram_known for w in found[1:])


@settings(max_examples=100, deadline=None)
@given(
    context=st.lists(st.text(alphabet="abcdefghijklm", min_size=1, max_size=6), min_size=1),
    response=st.lists(st.text(alphabet="nopqrstuvwxyz", min_size=1, max_size=6), min_size=1),
)
def test_words_of_a_disjoint_alphabet_are_unknown(context: list[str], response: list[str]) -> None:
    found = Lexicon(" ".join(context)).words_of(" ".join(response))
    assert len(found) == len(response)
    assert not any(w.known or w.bigram_known or w.copied for w in found)
