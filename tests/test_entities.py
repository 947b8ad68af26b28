"""Entity extraction without a model: the same entity written differently gets one key, common
words get none, and every kind (proper, quoted, identifier, quantity) is found."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teleo_server.entities import Entity, extract, keys, normalize_key


def kinds(text: str) -> dict[str, str]:
    return {e.key: e.kind for e in extract(text)}


# -- proper names and what is not one


def test_sentence_initial_stop_words_months_and_ids():
    ks = keys("We moved staging to us-east-2 in March.")
    assert "us-east-2" in ks
    assert "we" not in ks and "march" not in ks
    assert ks == ["us-east-2"]

    ks = keys("The staging cluster runs in eu-west-1")
    assert ks == ["eu-west-1"]
    assert "the" not in ks


def test_speaker_prefix_and_acronym():
    ents = extract("Caroline: I went to the LGBTQ support group yesterday")
    assert [(e.key, e.text, e.kind) for e in ents] == [("caroline", "Caroline", "proper"), ("lgbtq", "LGBTQ", "proper")]
    # "I" and its contractions are never entities
    assert keys("I'm sure I'll call Melanie, I think.") == ["melanie"]


def test_speaker_label_is_not_a_name_but_a_stop_word_name_is():
    assert keys("Note: remember the milk\nUser: where is the bank?") == []
    assert keys("Will: I think we should go.") == ["will"]


def test_possessive_is_stripped_so_memories_share_the_key():
    a = keys("Melanie's kids love the Grand Canyon")
    b = keys("Melanie said the Grand Canyon trip was long")
    assert a == ["melanie", "grand canyon"]
    assert set(a) <= set(b)
    assert keys("Caroline’s dog met Caroline's cat") == ["caroline"]  # typographic apostrophe too
    assert extract("Melanie's kids")[0].text == "Melanie"


def test_connectors_join_a_span_and_articles_are_dropped():
    assert keys("We went to the Bank of America branch") == ["bank of america"]
    assert keys("They played Ludwig van Beethoven at the Lord of the Rings concert") == [
        "ludwig van beethoven", "lord of the rings"]
    assert keys("He reads The New York Times daily") == ["new york times"]
    # a connector joins only between capitalised words
    assert keys("Paris of course was lovely") == ["paris"]
    # a sentence's first word joined across connectors: what follows them is an entity too
    assert keys("Price of the Nimbus Pro plan: $59 per month.") == ["price of the nimbus pro", "nimbus pro", "$59"]


def test_and_gives_the_parts():
    ks = keys("Yesterday Caroline and Melanie went hiking")
    assert "caroline" in ks and "melanie" in ks
    assert "yesterday" not in ks
    ks = keys("They moved from Bank of America and Wells Fargo")
    assert ks == ["bank of america", "wells fargo"]


def test_accents_and_case_fold_to_one_key():
    assert keys("We met José Müller today") == keys("We met Jose Muller today") == ["jose muller"]
    assert keys("The report by JOSÉ MÜLLER") == ["jose muller"]
    assert keys("Visit ＮＡＳＡ soon") == ["nasa"]  # NFKC: full-width letters


def test_dedup_keeps_first_surface_form():
    ents = extract("José Müller called. Later Jose Muller wrote.")
    assert [e.key for e in ents] == ["jose muller"]
    assert ents[0].text == "José Müller"


def test_sentence_initial_common_words_are_dropped_names_kept():
    ks = keys("Yesterday we went out. Also, thanks for coming. Hi there. Paris is lovely.")
    assert ks == ["paris"]
    # a stop word that is a name is kept when it is capitalised mid-sentence elsewhere
    assert "will" in keys("Will went home. Then we met Will again.")
    # a word found in lower case elsewhere is a common word
    assert keys("Deploy went fine. Later we will deploy again.") == []
    assert keys("Zebra rides start soon. We saw a zebra.") == []
    assert keys("Art is fun. We start now.") == ["art"]  # "art" only inside "start"


@pytest.mark.parametrize("text, name, article", [
    ("Die Firma Siemens baut Züge in München.", "siemens", "die"),
    ("Le projet Apollo a été lancé par la NASA.", "apollo", "le"),
    ("El equipo de Google trabaja en Madrid.", "google", "el"),
])
def test_sentence_initial_stop_words_of_other_languages(text, name, article):
    ks = keys(text)
    assert name in ks
    assert article not in ks


def test_german_nouns_are_not_joined():
    ks = keys("Die Firma Siemens baut Züge in München.")
    assert ks == ["firma", "siemens", "zuge", "munchen"]
    # an English text with a German-looking article keeps its span
    assert keys("Die Hard is a film starring Bruce Willis.") == ["die hard", "bruce willis"]


def test_a_foreign_stop_word_is_a_name_in_english_text():
    assert keys("Ella went to the store with her mom.") == ["ella"]
    assert keys("Ella fue al mercado con Juan.") == ["juan"]


def test_shouting_and_chat_acronyms():
    assert keys("PLEASE DO NOT DEPLOY ON FRIDAY") == []
    assert keys("OK, see you at 5 PM") == []
    assert keys("The US and UK teams work with the IT department") == ["us", "uk", "it"]
    assert keys("The APIs and the API gateway") == ["api"]


def test_honorifics_and_initials():
    assert keys("We met Dr. Jane Doe and Mrs Smith") == ["jane doe", "smith"]
    assert keys("I read J. R. R. Tolkien last year") == ["j r r tolkien"]
    assert keys("We chose Plan B. Then we left.") == ["plan b"]


def test_greek_and_cyrillic_names():
    assert keys("Мы были в Москва и Санкт-Петербург летом") == ["москва", "санкт-петербург"]
    assert keys("Το ταξίδι στην Αθήνα ήταν ωραίο") == ["αθηνα"]  # "Το": a Greek stop word


# -- quoted


def test_quoted_phrases():
    ents = extract('She called it "Project Zebracorn".')
    assert [(e.key, e.kind, e.text) for e in ents] == [("project zebracorn", "quoted", "Project Zebracorn")]
    ks = kinds("It is “Grand Hotel” and «Le Monde» and `os.path.join` and ‘Blue Moon’")
    assert ks == {"grand hotel": "quoted", "le monde": "quoted", "os.path.join": "quoted", "blue moon": "quoted"}
    # trailing punctuation inside the quote, and leading articles, do not change the key
    assert keys('He called it "The Zebracorn."') == ["zebracorn"]


def test_quote_limits_and_apostrophes():
    assert keys('He said "we should really go to the shop now, right?" twice') == []  # 10 words
    assert keys('It was "fine" and "the"') == []  # common words
    assert keys("He said 'synergy' and don't 'x' me; the kids' toys") == ["synergy"]
    assert keys("Caroline's and Melanie's") == ["caroline", "melanie"]  # apostrophes open no quote


def test_cjk_quotes_and_no_cjk_proper_names():
    ents = extract("東京の「新宿御苑」に行きました。『千と千尋』も見た。")
    assert [(e.key, e.kind) for e in ents] == [("新宿御苑", "quoted"), ("千と千尋", "quoted")]
    assert keys("北京办公室的网络密码每个月更换一次") == []
    assert keys("「ガンダム」") == ["ガンダム"]  # marks of kana are letters, not folded


# -- identifiers


def test_identifiers():
    ks = kinds("Call getUserName with user_id from src/main.py in v2.3.1 for INC-4821")
    assert ks == {"getusername": "identifier", "user_id": "identifier", "src/main.py": "identifier",
                  "v2.3.1": "identifier", "inc-4821": "identifier"}
    ks = kinds("Set AWS_REGION, read config.yaml, call os.path.join, open ~/.bashrc and /etc/hosts")
    for k in ("aws_region", "config.yaml", "os.path.join", "~/.bashrc", "/etc/hosts"):
        assert ks[k] == "identifier", k
    ks = kinds("Moved EC2 and S3 to GPT-4, COVID-19 era, on PostgreSQL and the iPhone; C++ too")
    for k in ("ec2", "s3", "gpt-4", "covid-19", "postgresql", "iphone", "c++"):
        assert ks[k] == "identifier", k


def test_urls_emails_handles_and_issue_numbers():
    ks = kinds("See https://www.Example.com/Docs/?q=1 or mail Caroline@Example.com; ping @melanie in #general about PR #123.")
    assert ks["example.com/docs"] == "identifier"
    assert ks["caroline@example.com"] == "identifier"
    assert ks["@melanie"] == "identifier"
    assert ks["#general"] == "identifier"
    assert ks["#123"] == "identifier"  # documented: the number alone links "PR #123" and "#123"
    # a URL without a scheme has the same key
    assert keys("docs at example.com/docs") == ["example.com/docs"]
    assert keys("host api.example.com is down") == ["api.example.com"]


def test_what_is_not_an_identifier():
    assert keys("and/or TCP/IP 24/7 e.g. i.e. the 3rd time at 10am in the 1990s, 3.5 or 2023") == []


# -- quantities


def test_quantities_normalise_spacing_numbers_and_units():
    assert keys("latency was 250ms") == keys("latency was 250 ms") == ["250 ms"]
    assert keys("it cost $1,200") == ["$1200"]
    assert keys("it cost 1,200$") == ["$1200"]
    assert keys("about 40% of it") == keys("about 40 percent of it") == ["40%"]
    assert keys("€30 or 30 €") == ["€30"]
    assert keys("12 km in 5 days, 2 hours, 3.5 GB") == ["12 km", "5 d", "2 h", "3.5 gb"]
    assert keys("2 hrs or 2h") == ["2 h"]
    assert keys("3.50 GB or 3,5 GB") == ["3.5 gb"]
    assert keys("$5M or $5 million") == ["$5m"]
    assert keys("10-20ms spikes") == ["10-20 ms"]
    ents = extract("latency 250 ms.")
    assert (ents[0].text, ents[0].kind) == ("250 ms", "quantity")


def test_dates_are_quantities_and_bare_numbers_are_nothing():
    ents = extract("released on 2026-03-14 and 2026/3/14")
    assert [(e.key, e.kind) for e in ents] == [("2026-03-14", "quantity")]
    assert keys("In 2023 we had 3 kids and 12 cats.") == []
    assert keys("2023") == []


def test_a_unit_consumed_by_a_number_is_no_acronym():
    assert keys("logs take 3.5 GB now") == ["3.5 gb"]


# -- API


def test_limit_and_order():
    text = " ".join(f"host{i}.example.com" for i in range(100))
    ents = extract(text, limit=10)
    assert [e.key for e in ents] == [f"host{i}.example.com" for i in range(10)]
    assert extract(text, limit=0) == []
    assert len(extract(text)) == 64
    assert keys("Caroline, NASA, eu-west-1, 40%", limit=2) == ["caroline", "nasa"]


def test_empty_and_trivial_texts():
    assert extract("") == []
    assert keys("   \n\t ") == []
    assert keys("the and of") == []


def test_entity_is_frozen_with_slots():
    e = extract("We met Caroline")[0]
    assert e == Entity("caroline", "Caroline", "proper")
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.key = "x"  # type: ignore[misc]
    assert not hasattr(e, "__dict__")


def test_multiline_bullets_and_numbered_lists():
    text = "- Caroline went home\n- Melanie stayed\n1. Gina left\n* Also done"
    assert keys(text) == ["caroline", "melanie", "gina"]


def test_normalize_key_matches_extract():
    assert normalize_key("  The Grand Canyon ") == "grand canyon"
    assert normalize_key("Melanie’s") == "melanie"
    assert normalize_key("José  MÜLLER") == "jose muller"
    assert normalize_key("") == ""


_PIECES = ["Caroline", "of", "the", "and", "NASA", "I'm", "Melanie's", "v2.3.1", "250", "ms", "$", "1,200", '"',
           "'", "US", "DO", "l'Europe", "Dr.", "J.", "https://x.y/z", "-", "1.", "&", "O'Brien", "getUserName",
           "a_b", "x.py", "#1", "@a", "2026-13-40", "2026-03-14", "「東京」", "\n", "José", "ÉCOLE", ":"]


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.text(max_size=120), st.lists(st.sampled_from(_PIECES), max_size=20).map(" ".join)),
       st.integers(min_value=0, max_value=12))
def test_any_text_gives_unique_normalised_keys(text, limit):
    ents = extract(text, limit)
    ks = [e.key for e in ents]
    assert len(ks) <= limit
    assert len(set(ks)) == len(ks)
    for e in ents:
        assert e.key and e.key == e.key.strip() and "  " not in e.key and "\n" not in e.key
        assert e.key == e.key.lower()
        assert e.kind in ("proper", "quoted", "identifier", "quantity")
        assert e.text


def test_the_word_lists_leave_no_copy_in_the_stop_words_package():
    """The lists are read once into our own cached sets; the package's own cache of the raw lists
    (0.7 MB for the 25 languages read) would only be a second copy held for the server's life."""
    import stop_words

    from teleo_server import analysis, entities

    stop_words.STOP_WORDS_CACHE.clear()
    entities._word_lists.cache_clear()
    analysis.stopwords.cache_clear()
    analysis._folded_stopwords.cache_clear()
    analysis.keyword_stopwords.cache_clear()
    _, en_all, codes, index = entities._word_lists()
    assert "the" in en_all and "de" in codes and codes.index("de") in index["und"]
    assert codes.index("fr") in index["les"] and codes.index("de") not in index["les"]
    assert index["und"] is index["oder"]  # words of the same languages share one tuple
    assert "der" in analysis.stopwords("de")
    assert stop_words.STOP_WORDS_CACHE == {}
