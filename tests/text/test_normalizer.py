"""normalize_text: punctuation, abbreviations, scripts, dropped characters, layout, invariants."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from xtts_ft.text import (
    ETHIOPIC_RANGES,
    PUNCTUATION,
    NormalizedText,
    is_ethiopic,
    is_ethiopic_letter,
    normalize_lines,
    normalize_text,
)
from xtts_ft.text.abbreviations import ABBREVIATIONS, expand_abbreviations

SAMPLES = [
    "ሰላም፣ እንዴት ነህ? ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው።",
    "ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ጥንታዊ ሀገር ናት።",
    "በ2015 ዓ.ም 25 ተማሪዎች ትምህርታቸውን አጠናቀቁ።",
    "ዶ/ር አበበ ከ፲፱፻፹፯ ጀምሮ በአ.አ ዩኒቨርሲቲ ያስተምራሉ፤ ተማሪዎቻቸውም ብዙ ናቸው።",
    "የBBC ዘጋቢ «ነገ እመጣለሁ» አለ፦ “እሺ” ብላ መለሰች።",
    "ዋጋው 5.50 ብር ሲሆን ቅናሹ 25% ነው፥ ግን ትናንት ብር 7 ነበር!!",
    "ወ/ሮ አልማዝ ገ/ሚካኤል የት/ቤቱ ርዕሰ መምህርት ናቸው፡፡ ልጆቿ 3ቱም ተማሪዎች ናቸው::",
    "ጠ/ሚ/ር ዐቢይ (የኢትዮጵያ ጠቅላይ ሚኒስትር) ዛሬ ንግግር አደረጉ 😀🎉",
    "ሐሙስ ፀሐይ ወጣች፡ ሠራተኞቹ ዐረፉ፧",
    "እ.ኤ.አ በ2020 ኮቪድ-19 ወረርሽኝ — በዓለም ዙሪያ — ተስፋፋ…",
    "\ufeffሰላም\u200b ነው\u00a0\u00a0እሺ\u2009ጥሩ\t\n",
    "- የመጀመሪያው ነጥብ: 16ኛው ክፍለ ዘመን [ማጣቀሻ 1] ሲቀነስ -5 ዲግሪ",
    "café naïve Straße don’t stop ሰላም",
    "1,000,000 ሰዎች እና 1 000 000 ዛፎች፣ 12345678901234567 ቁጥር",
    "«» ‘ጥቅስ’ / | * # @ & ሰላም {ቅንፍ} <ቀስት>",
    "Привет 你好 مرحبا ሰላም",
]


# --- empty and whitespace --------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", " ", "\t\n", "\u00a0\u2009 ", "   \n  "])
def test_empty_and_whitespace_only(text: str) -> None:
    assert normalize_text(text, fold_homophones=False) == NormalizedText("", Counter())


def test_zero_width_and_format_chars_removed_and_counted() -> None:
    result = normalize_text("\ufeffሰላ\u200bም\u200c ነው\u2060\u200d", fold_homophones=False)
    assert result.text == "ሰላም ነው"
    assert result.dropped == Counter({"\ufeff": 1, "\u200b": 1, "\u200c": 1, "\u2060": 1, "\u200d": 1})


def test_unicode_spaces_become_single_spaces() -> None:
    result = normalize_text("  ሰላም\u00a0\u00a0ነው\u2009እሺ\u202fጥሩ\u3000\tአዎ\n", fold_homophones=False)
    assert result.text == "ሰላም ነው እሺ ጥሩ አዎ"
    assert not result.dropped


def test_nfc_is_applied_first() -> None:
    decomposed = "cafe\u0301"  # e + combining acute
    assert normalize_text(decomposed, fold_homophones=False).text == "cafe"
    assert normalize_text(decomposed, fold_homophones=False).dropped == Counter()


# --- punctuation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mark", "mapped"),
    [("።", "."), ("፣", ","), ("፤", ";"), ("፥", ":"), ("፦", ":"), ("፧", "?"), ("፨", ".")],
)
def test_each_ethiopic_mark(mark: str, mapped: str) -> None:
    result = normalize_text(f"ሰላም{mark} ነው{mark}", fold_homophones=False)
    assert result.text == f"ሰላም{mapped} ነው{mapped}"
    assert not result.dropped


def test_wordspace_is_a_space() -> None:
    assert normalize_text("ሰላም፡ነው፡እሺ", fold_homophones=False).text == "ሰላም ነው እሺ"


@pytest.mark.parametrize("stop", ["፡፡", "::", "፡ ፡", ":::"])
def test_double_wordspace_and_double_colon_are_full_stops(stop: str) -> None:
    assert normalize_text(f"ሰላም ነው{stop} እሺ{stop}", fold_homophones=False).text == "ሰላም ነው. እሺ."


def test_ascii_punctuation_kept_without_space_before() -> None:
    assert normalize_text("ሰላም , ነው ; እሺ : አዎ ? አይ ! ጥሩ .", fold_homophones=False).text == "ሰላም, ነው; እሺ: አዎ? አይ! ጥሩ."


def test_space_after_punctuation_before_a_word() -> None:
    assert normalize_text("ሰላም።ነው፣እሺ?አዎ", fold_homophones=False).text == "ሰላም. ነው, እሺ? አዎ"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ሰላም!!!", "ሰላም!"),
        ("ሰላም...", "ሰላም."),
        ("ሰላም…", "ሰላም."),
        ("ሰላም?!", "ሰላም?"),
        ("ሰላም።።", "ሰላም."),
        ("ሰላም ፣ ።", "ሰላም."),
    ],
)
def test_punctuation_runs_collapse_to_strongest(text: str, expected: str) -> None:
    assert normalize_text(text, fold_homophones=False).text == expected


@pytest.mark.parametrize(
    "text",
    ["“ሰላም” አለ።", "«ሰላም» አለ።", "‘ሰላም’ አለ።", '"ሰላም" አለ።', "„ሰላም“ አለ።", "« ሰላም » አለ።"],
)
def test_quotes_become_ascii_double_quotes(text: str) -> None:
    result = normalize_text(text, fold_homophones=False)
    assert result.text == '"ሰላም" አለ.'
    assert not result.dropped


def test_quote_spacing_around_punctuation() -> None:
    assert normalize_text("እሱም፦«ነገ እመጣለሁ።»አለ።", fold_homophones=False).text == 'እሱም: "ነገ እመጣለሁ." አለ.'


def test_unmatched_quote_is_kept() -> None:
    assert normalize_text("«ሰላም አለ።", fold_homophones=False).text == '"ሰላም አለ.'


def test_empty_quotes_dropped_and_counted() -> None:
    result = normalize_text("ሰላም «» ነው", fold_homophones=False)
    assert result.text == "ሰላም ነው"
    assert result.dropped == Counter({'"': 2})


def test_brackets_become_pauses() -> None:
    result = normalize_text("ጠቅላይ ሚኒስትሩ (የሀገሪቱ መሪ) ዛሬ [በአዲስ አበባ] ተናገሩ።", fold_homophones=False)
    assert result.text == "ጠቅላይ ሚኒስትሩ, የሀገሪቱ መሪ, ዛሬ, በአዲስ አበባ, ተናገሩ."
    assert not result.dropped


def test_leading_marks_removed_and_counted() -> None:
    result = normalize_text("- (ሰላም) ነው", fold_homophones=False)
    assert result.text == "ሰላም, ነው"
    assert result.dropped == Counter({"-": 1, "(": 1})


def test_hyphen_inside_word_kept_free_dash_is_a_pause() -> None:
    assert normalize_text("ኮቪድ-19 ወረርሽኝ — በዓለም - ተስፋፋ", fold_homophones=False).text == "ኮቪድ-አስራ ዘጠኝ ወረርሽኝ, በዓለም, ተስፋፋ"


def test_output_alphabet_is_closed() -> None:
    allowed = re.compile(f"[a-z '{re.escape(PUNCTUATION)}\"-]")
    for sample in SAMPLES:
        for ch in normalize_text(sample, fold_homophones=False).text:
            assert is_ethiopic_letter(ch) or allowed.fullmatch(ch), (sample, ch)


def test_layout_invariants() -> None:
    for sample in SAMPLES:
        text = normalize_text(sample, fold_homophones=False).text
        assert text == text.strip()
        assert "  " not in text
        assert not re.search(f" [{re.escape(PUNCTUATION)}]", text), text
        assert not re.search(f"[{re.escape(PUNCTUATION)}][^ {re.escape(PUNCTUATION)}\"]", text), text


# --- abbreviations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ዓ.ም", "ዓመተ ምሕረት"),
        ("ዓ/ም", "ዓመተ ምሕረት"),
        ("ዐ.ም", "ዓመተ ምሕረት"),
        ("ዓ.ም.", "ዓመተ ምሕረት."),
        ("ዓ፡ም፡", "ዓመተ ምሕረት"),
        ("ዓ.ዓ", "ዓመተ ዓለም"),
        ("እ.ኤ.አ 2020", "እንደ ኤውሮፓውያን አቆጣጠር ሁለት ሺህ ሃያ"),
        ("እአአ", "እንደ አውሮፓውያን አቆጣጠር"),
        ("ዶ/ር አበበ", "ዶክተር አበበ"),
        ("በዶ/ር አበበ", "በዶክተር አበበ"),
        ("ፕ/ር መስፍን", "ፕሮፌሰር መስፍን"),
        ("ወ/ሮ አልማዝ", "ወይዘሮ አልማዝ"),
        ("ወ/ሪት ሰላም", "ወይዘሪት ሰላም"),
        ("ጠ/ሚ ዐቢይ", "ጠቅላይ ሚኒስትር ዐቢይ"),
        ("ጠ/ሚ/ር", "ጠቅላይ ሚኒስትር"),
        ("ት/ቤት", "ትምህርት ቤት"),
        ("ከት/ቤቱ", "ከትምህርት ቤቱ"),
        ("ት/ቤቶች", "ትምህርት ቤቶች"),
        ("መ/ቤት", "መሥሪያ ቤት"),
        ("ፍ/ቤት", "ፍርድ ቤት"),
        ("ጽ/ቤት", "ጽሕፈት ቤት"),
        ("ቤ/ክ", "ቤተ ክርስቲያን"),
        ("ቤ/ክርስቲያን", "ቤተ ክርስቲያን"),
        ("አ.አ", "አዲስ አበባ"),
        ("ገ/ሚካኤል", "ገብረሚካኤል"),
        ("ወ/ማርያም", "ወልደማርያም"),
        ("ተ/ቁ 3", "ተራ ቁጥር ሶስት"),
        ("ቁ. 5", "ቁጥር አምስት"),
        ("10 ኪ.ሜ", "አስር ኪሎ ሜትር"),
        ("ወ.ዘ.ተ", "ወዘተ"),
    ],
)
def test_abbreviations(text: str, expected: str) -> None:
    result = normalize_text(text, fold_homophones=False)
    assert result.text == expected
    assert not result.dropped


def test_normalised_text_never_looks_like_an_abbreviation() -> None:
    # "ዓ። ም" normalises to "ዓ. ም"; a space after the dot is never read as "ዓ.ም", so a second
    # pass cannot expand it (idempotence). Same for single-letter words before ":".
    for text in ("ዓ። ም", "ገ፦ ማርያም", "አ። አ"):
        once = normalize_text(text, fold_homophones=False).text
        assert normalize_text(once, fold_homophones=False).text == once
    assert normalize_text("ዓ። ም", fold_homophones=False).text == "ዓ. ም"


def test_abbreviation_needs_a_word_start() -> None:
    assert expand_abbreviations("ሰላምዶ/ር") == "ሰላምዶ/ር"
    assert normalize_text("ሀገር/ክልል", fold_homophones=False).text == "ሀገር ክልል"


def test_abbreviation_dot_kept_as_full_stop_at_the_end() -> None:
    assert normalize_text("በ2015 ዓ.ም. ተወለደ። በ2016 ዓ.ም.", fold_homophones=False).text == (
        "በሁለት ሺህ አስራ አምስት ዓመተ ምሕረት ተወለደ. በሁለት ሺህ አስራ ስድስት ዓመተ ምሕረት."
    )


def test_abbreviation_table_size_and_shape() -> None:
    assert 15 <= len(ABBREVIATIONS) <= 40
    written = [w for w, _, _ in ABBREVIATIONS]
    assert len(written) == len(set(written))
    for _written, spoken, _ in ABBREVIATIONS:
        assert "/" not in spoken and "." not in spoken
        assert expand_abbreviations(spoken) == spoken  # expansions are stable


# --- homophones ------------------------------------------------------------------------------

_ORDERS = range(7)


@pytest.mark.parametrize("order", _ORDERS)
@pytest.mark.parametrize(
    ("source", "target"),
    [(0x1210, 0x1200), (0x1280, 0x1200), (0x1220, 0x1230), (0x12D0, 0x12A0), (0x1340, 0x1338)],
    ids=["ሐ->ሀ", "ኀ->ሀ", "ሠ->ሰ", "ዐ->አ", "ፀ->ጸ"],
)
def test_homophone_folding_per_order(order: int, source: int, target: int) -> None:
    src, dst = chr(source + order), chr(target + order)
    if order == 3 and target in (0x1200, 0x12A0):
        dst = chr(target)  # ሓ ኃ -> ሀ and ዓ -> አ: the 4th order of the h and glottal rows folds to the 1st
    assert normalize_text(f"ቃል{src}", fold_homophones=True).text == f"ቃል{dst}"
    assert normalize_text(f"ቃል{src}", fold_homophones=False).text == f"ቃል{src}"  # kept unless asked


@pytest.mark.parametrize(("source", "target"), [("ሃገር", "ሀገር"), ("ኣመት", "አመት"), ("ዓመት", "አመት"), ("ሓምሌ", "ሀምሌ")])
def test_fourth_order_after_h_and_glottal_stop_folds_to_the_first(source: str, target: str) -> None:
    assert normalize_text(source, fold_homophones=True).text == target
    assert normalize_text("ላማ ሳር", fold_homophones=True).text == "ላማ ሳር"  # other rows keep their 4th order


@pytest.mark.parametrize(
    ("source", "target"),
    [("ሗ", "ኋ"), ("ሧ", "ሷ"), ("ኇ", "ሇ"), ("ኋ", "ኋ"), ("ኈ", "ኈ"), ("ፇ", "ፇ")],
)
def test_homophone_folding_labialised(source: str, target: str) -> None:
    assert normalize_text(source, fold_homophones=True).text == target


def test_homophone_folding_in_a_sentence() -> None:
    result = normalize_text("ሐሙስ ፀሐይ ወጣች፡ ሠራተኞቹ ዐረፉ፧ ኃይሉ ሥራ ጀመረ።", fold_homophones=True)
    assert result.text == "ሀሙስ ጸሀይ ወጣች ሰራተኞቹ አረፉ? ሀይሉ ስራ ጀመረ."


def test_homophone_folding_applies_to_expansions() -> None:
    assert normalize_text("2015 ዓ.ም", fold_homophones=True).text == "ሁለት ሺህ አስራ አምስት አመተ ምህረት"


# --- scripts and dropped characters ----------------------------------------------------------


def test_latin_kept_lowercased_and_glued_to_ethiopic_prefix() -> None:
    result = normalize_text("የBBC ዘጋቢ ከNew York ዘገበ።", fold_homophones=False)
    assert result.text == "የbbc ዘጋቢ ከnew york ዘገበ."
    assert not result.dropped


def test_latin_diacritics_folded() -> None:
    result = normalize_text("Café naïve Straße Łódź ÆON don’t", fold_homophones=False)
    assert result.text == "cafe naive strasse lodz aeon don't"
    assert not result.dropped


def test_emoji_dropped_and_counted() -> None:
    result = normalize_text("ሰላም😀😀 ነው🎉።", fold_homophones=False)
    assert result.text == "ሰላም ነው."
    assert result.dropped == Counter({"😀": 2, "🎉": 1})


def test_emoji_between_words_is_a_word_break() -> None:
    assert normalize_text("ሰላም😀ነው", fold_homophones=False).text == "ሰላም ነው"


def test_other_scripts_and_symbols_dropped_and_counted() -> None:
    result = normalize_text("ሰላም Привет # ነው * | ~ ©", fold_homophones=False)
    assert result.text == "ሰላም ነው"
    assert result.dropped == Counter(
        {"П": 1, "р": 1, "и": 1, "в": 1, "е": 1, "т": 1, "#": 1, "*": 1, "|": 1, "~": 1, "©": 1}
    )


def test_ethiopic_combining_mark_dropped_without_break() -> None:
    result = normalize_text("ሰላ\u135fም", fold_homophones=False)
    assert result.text == "ሰላም"
    assert result.dropped == Counter({"\u135f": 1})


def test_line_without_letters_becomes_empty_and_is_counted() -> None:
    result = normalize_text("😀 ! ?", fold_homophones=False)
    assert result.text == ""
    assert result.dropped == Counter({"😀": 1, "?": 1})  # "! ?" is one pause ("?"), then stripped


def test_nothing_dropped_silently() -> None:
    for sample in SAMPLES:
        result = normalize_text(sample, fold_homophones=False)
        for ch in set(sample):
            if ch.isspace() or ch.lower() in result.text:
                continue
            if ch in result.dropped:
                continue
            # whatever is neither in the output nor counted must be a documented mapping
            assert ch in "።፣፤፥፦፧፨፡«»“”‘’…—()[]0123456789%/.:-éïß" or is_ethiopic(ch), (sample, ch)


# --- script helpers --------------------------------------------------------------------------


def test_ethiopic_ranges_and_predicates() -> None:
    assert (0x1200, 0x137F) in ETHIOPIC_RANGES
    assert is_ethiopic("ሰላም") and is_ethiopic("።") and is_ethiopic("፲")
    assert not is_ethiopic("") and not is_ethiopic("ሰላም a") and not is_ethiopic("a")
    assert is_ethiopic_letter("ሰ") and not is_ethiopic_letter("።") and not is_ethiopic_letter("፲")
    assert not is_ethiopic_letter("\u1249")  # unassigned inside the block


def test_the_normaliser_keeps_exactly_the_letters_the_tokenizer_reserves() -> None:
    """One set of Ethiopic blocks: every letter kept has its own token; Extended-B is dropped and counted."""
    from xtts_ft.tokenizer.ethiopic import ETHIOPIC_RANGES as tokenizer_ranges
    from xtts_ft.tokenizer.ethiopic import ethiopic_characters

    assert tokenizer_ranges is ETHIOPIC_RANGES
    assert [lo for lo, _ in ETHIOPIC_RANGES] == [0x1200, 0x1380, 0x2D80, 0xAB00]  # NOTES: Amharic's blocks
    reserved = set(ethiopic_characters())
    letters = [chr(cp) for lo, hi in ETHIOPIC_RANGES for cp in range(lo, hi + 1) if is_ethiopic_letter(chr(cp))]
    kept = set(normalize_text(" ".join(letters), fold_homophones=False).text.replace(" ", ""))
    assert kept == set(letters) and kept <= reserved
    gurage = "\U0001e7e0"  # Ethiopic Extended-B (Gurage): no reserved token, so not kept
    result = normalize_text(f"ሰላም{gurage} ነው", fold_homophones=False)
    assert result.text == "ሰላም ነው" and result.dropped == Counter({gurage: 1})


# --- invariants ------------------------------------------------------------------------------


@pytest.mark.parametrize("fold", [False, True])
@pytest.mark.parametrize("sample", SAMPLES)
def test_idempotent(sample: str, fold: bool) -> None:
    once = normalize_text(sample, fold_homophones=fold).text
    twice = normalize_text(once, fold_homophones=fold)
    assert twice.text == once
    assert not twice.dropped


def test_deterministic() -> None:
    first = [normalize_text(s, fold_homophones=False) for s in SAMPLES]
    second = [normalize_text(s, fold_homophones=False) for s in reversed(SAMPLES)][::-1]
    assert first == second


def test_normalize_lines() -> None:
    lines = ["ሰላም።\n", "\n", "በ2015 ዓ.ም\n"]
    results = list(normalize_lines(lines, fold_homophones=False))
    assert [r.text for r in results] == ["ሰላም.", "", "በሁለት ሺህ አስራ አምስት ዓመተ ምሕረት"]
    assert list(normalize_lines(["ሐ"], fold_homophones=True))[0].text == "ሀ"


def test_result_is_frozen() -> None:
    result = normalize_text("ሰላም", fold_homophones=False)
    with pytest.raises(AttributeError):
        result.text = "x"  # type: ignore[misc]


def test_idempotent_and_closed_on_random_mixtures() -> None:
    import random

    pool = list("ሰላምሐሠዐፀኀዓቱኛብር ።፣፤፥፦፧፨፡:.,;?!-—\"'«»“”‘’()[]{}/|*#%$0123456789፩፲፻፼ ABéß😀\u200b\u00a0")
    pool += ["ዓ.ም", "ዶ/ር", "ት/ቤት", "ገ/", " 5.50 ብር", "1,000", "1 000", "-5", "እ.ኤ.አ", "::", "፡፡"]
    rng = random.Random(1234)
    allowed = re.compile(f"[a-z '{re.escape(PUNCTUATION)}\"-]")
    for _ in range(3000):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(1, 20)))
        once = normalize_text(text, fold_homophones=False)
        again = normalize_text(once.text, fold_homophones=False)
        assert again.text == once.text and not again.dropped, text
        assert all(is_ethiopic_letter(c) or allowed.fullmatch(c) for c in once.text), text
        assert not re.search(f" [{re.escape(PUNCTUATION)}]|  |^ | $", once.text), text


# Typical ~80-character lines (mean 77): the speed figure quoted for this module comes from
# `python -m pytest tests/text -k throughput -s` (prints lines/s on one core).
THROUGHPUT_LINES = [
    "ሰላም፣ እንዴት ነህ? ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው። ነገ ደግሞ ዝናብ ሊዘንብ እንደሚችል ተነግሯል፤ ተጠንቀቁ።",
    "ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ጥንታዊ ሀገር ናት፤ ብዙ ብሔሮችና ቋንቋዎች ያሏት ውብና ታሪካዊ ሀገር ናት፤ ሕዝቧም እንግዳ ተቀባይ ነው።",
    "በ2015 ዓ.ም 25 ተማሪዎች ትምህርታቸውን አጠናቀቁ። ከእነሱ ውስጥ 3ቱ በከፍተኛ ማዕረግ ተመርቀዋል፤ ወላጆቻቸውም ተደስተዋል።",
    "ዶ/ር አበበ በአዲስ አበባ ዩኒቨርሲቲ ለረጅም ዓመታት አስተምረዋል፤ ብዙ መጻሕፍትንም ጽፈዋል፤ ተማሪዎቻቸውም ያከብሯቸዋል።",
    "የBBC ዘጋቢ «ነገ እመጣለሁ» አለ፤ እሷም “እሺ” ብላ መለሰች። ከዚያም ሁለቱም ወደ ቤታቸው በደስታ ሄዱ።",
    "ዋጋው 5.50 ብር ሲሆን ቅናሹ 25% ነው፤ ባለፈው ሳምንት ግን 7 ብር ነበር ብለው በገበያው ያሉ ነጋዴዎቹ ተናገሩ።",
]


def test_throughput() -> None:
    import time

    n = 6000
    start = time.perf_counter()
    for i in range(n):
        normalize_text(THROUGHPUT_LINES[i % len(THROUGHPUT_LINES)], fold_homophones=False)
    rate = n / (time.perf_counter() - start)
    print(f"\nnormalize_text: {rate:,.0f} lines/s (mean {sum(map(len, THROUGHPUT_LINES)) / 6:.0f} chars)")
    assert rate > 2000  # a loose floor: catches a pathological regex, not a slow machine
