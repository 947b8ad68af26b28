"""The text analyser of the lexical spaces: every language's text becomes terms, accents and
particles do not keep a memory from being found, and keyword-only retrieval works without an
embedder, over gRPC and from the CLI."""

from __future__ import annotations

import numpy as np
import pytest
from teleo.v1 import memory_pb2 as pb

from bench.harness import memories as syn
from teleo_server.analysis import Analyzer, detect_language, extract_keywords, strip_particle, tokenize
from teleo_server.domain import AccessLevel, Principal
from teleo_server.pipeline import PipelineSettings, make_retriever
from teleo_server.pipeline.types import Hit, Outcome, Query

PLAIN = Analyzer(stem=False, drop_stopwords=False)
ADMIN = Principal("t", "t", frozenset({"*"}), frozenset({"*"}), AccessLevel.RESTRICTED, "t")
CORPUS = {
    "ja": "東京の会議は毎週月曜日の午前十時に始まります",
    "zh": "北京办公室的网络密码每个月更换一次",
    "ko": "김민준은 서울에서 데이터 팀을 이끌고 있습니다",
    "es": "La reunión de presupuesto es en la estación central de Málaga",
    "pt": "A apresentação do projeto Açores será na sexta-feira",
    "ar": "اجتماع الفريق في القاهرة يوم الأحد القادم",
    "en": "The deploy script reads AWS_REGION from the staging env file",
}
QUERIES = {  # written the way a user would type them: no accents, other particles, no spaces
    "ja": "東京会議", "zh": "北京网络密码", "ko": "김민준의 팀", "es": "reunion estacion malaga",
    "pt": "apresentacao acores", "ar": "اجتماع القاهرة", "en": "what does the deploy script read",
}


def test_terms_in_every_script():
    tokenize = PLAIN.terms  # segmentation alone: no stems, stop words kept
    assert tokenize("Le CAFÉ") == ["le", "cafe"]
    assert Analyzer(fold_accents=False, stem=False, drop_stopwords=False).terms("Le CAFÉ") == ["le", "café"]
    assert tokenize("東京都") == ["東", "東京", "京", "京都", "都"]  # unigrams and bigrams
    assert tokenize("ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ") == ["full", "width", "abc"]  # NFKC
    assert tokenize("서울에서는 날씨가") == ["서울에서는", "서울", "날씨가", "날씨"]  # whole and without particle
    assert strip_particle("가") == "가"  # a particle alone is a word
    # hamza forms of alef and ta marbuta folded; the word with and without its article
    assert tokenize("أحمد في الإسكندرية") == ["احمد", "في", "الاسكندريه", "اسكندريه"]
    assert tokenize("على") != tokenize("علي")  # "on" is not the name Ali
    assert tokenize("iPhone用の充電器") == ["iphone", "用", "用の", "の", "の充", "充", "充電", "電", "電器", "器"]
    assert Analyzer(ascii_only=True).terms("Le café 東京") == ["le", "caf"]  # the first analyser, for comparison


def test_language_detection_and_keywords():
    assert [detect_language(CORPUS[k]) for k in CORPUS] == list(CORPUS)
    assert extract_keywords("that thing we discussed about the API") == ["discussed", "api"]
    assert extract_keywords("¿Dónde está la estación de tren?") == ["estacion", "tren"]
    assert extract_keywords("北京的天气") == ["北京", "天气"]  # no pair with a function character
    assert extract_keywords("吉田さんが予約した店は？") == ["吉田", "予約", "店"]  # kana separates the words
    assert "최유나" in extract_keywords("최유나는 회의에 갔다")  # the name survives particle stripping
    assert extract_keywords("ما هو المشروب المفضل عند علي؟") == ["مشروب", "مفضل", "علي"]
    assert extract_keywords("42 is 7 a no") == []


def test_the_version_names_the_settings():
    assert Analyzer().version == "2+fold+stem+stop" and Analyzer(ascii_only=True).version == "1"
    assert PLAIN.version == "2+fold"


def test_stems_and_stop_words_are_on_by_default_and_each_can_be_turned_off():
    assert tokenize("the runners were running") == ["runner", "run"]
    assert tokenize("Las estaciones de tren") == ["estacion", "tren"]  # Spanish stems and stop words
    assert Analyzer(drop_stopwords=False).terms("the runners were running") == ["the", "runner", "were", "run"]
    assert Analyzer(stem=False).terms("the runners were running") == ["runners", "running"]
    assert Analyzer(drop_stopwords=False).terms("las estaciones", lang="es") == ["las", "estacion"]


def test_a_query_whose_language_cannot_be_told_asks_for_its_words_stems_in_every_language():
    # the Spanish memory is stemmed as Spanish ("presupuest", "malag"); the query names no stop word,
    # and English stems would leave its words whole
    assert tokenize(CORPUS["es"]) == ["reunion", "presupuest", "estacion", "central", "malag"]
    assert Analyzer().terms("presupuesto malaga", lang="en") == ["presupuesto", "malaga"]
    asked = Analyzer().query_terms("presupuesto malaga")
    assert {"presupuest", "malag", "presupuesto", "malaga"} <= set(asked) and len(asked) == len(set(asked))
    # one stop word of two languages ("do": English and Portuguese) does not decide either; stop
    # words of any of them are left out
    asked = Analyzer().query_terms("novidades do projeto jacaranda")
    assert {"projet", "jacarand"} <= set(asked) and "do" not in asked
    # a query sure of its language keeps that language's stems alone
    assert Analyzer().query_terms("what does the deploy script read") == ["deploy", "script", "read"]
    r = _retriever(PipelineSettings())
    assert _found(r, "presupuesto malaga", "single_space:E6_lexical")[0][:1] == ["es"]
    assert _found(r, "presupuesto malaga", "keywords")[0][:1] == ["es"]


def test_threads_stem_with_stemmers_of_their_own():
    # a Snowball stemmer keeps state while it works: two threads never share one
    from concurrent.futures import ThreadPoolExecutor

    from teleo_server.analysis import _stemmer

    main = _stemmer("en")
    with ThreadPoolExecutor(4) as pool:
        theirs = set(pool.map(lambda _: id(_stemmer("en")), range(64)))
    assert _stemmer("en") is main and id(main) not in theirs
    texts = [f"the runners were running {i} studies of the estaciones, jacarandas y reuniones {i}" for i in range(300)]
    alone = [tokenize(t) for t in texts]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(tokenize, texts)) == alone


def _retriever(settings: PipelineSettings):
    r = make_retriever(settings, "numpy")
    rng = np.random.default_rng(0)
    for lang, text in CORPUS.items():
        r.add(syn.memory(lang, text), syn.embedding(syn.chunk(syn.unit(rng.normal(size=384).astype(np.float32)))))
    return r


def _found(r, text: str, profile: str, embedding=None) -> tuple[list[str], Outcome]:
    events = list(r.retrieve(Query(text=text, embedding=embedding, principal=ADMIN, top_k=3, profile=profile)))
    return [e.memory.id for e in events if isinstance(e, Hit)], next(e for e in events if isinstance(e, Outcome))


@pytest.mark.parametrize("lang", list(CORPUS))
def test_every_language_is_found_lexically(lang):
    new, old = _retriever(PipelineSettings()), _retriever(PipelineSettings(analyzer={"ascii_only": True}))
    assert _found(new, QUERIES[lang], "single_space:E6_lexical")[0][:1] == [lang]
    assert _found(new, QUERIES[lang], "keywords")[0][:1] == [lang]
    if lang != "en":  # the first analyser found none of them
        assert _found(old, QUERIES[lang], "single_space:E6_lexical")[0][:1] != [lang]


def test_openclaw_without_an_embedding_runs_keyword_only():
    r = _retriever(PipelineSettings())
    ids, outcome = _found(r, QUERIES["es"], "openclaw")
    assert ids[:1] == ["es"] and outcome.degraded
    assert outcome.degraded_reason == "embedding unavailable: the keywords profile ran instead"
    _, plain = _found(r, QUERIES["es"], "teleological")
    assert plain.degraded_reason == "embedding unavailable: lexical only"  # the default profile's degraded mode


def test_a_profile_falling_back_to_an_unknown_profile_is_refused():
    from teleo_server.errors import InvalidArgument
    from teleo_server.pipeline import profiles

    settings = PipelineSettings(profiles={"mine": {"stages": ["sparse_recall", "finalize"],
                                                   "without_embedding": "nope"}})
    with pytest.raises(InvalidArgument, match="pipeline.profiles.mine.without_embedding: names unknown profile 'nope'"):
        profiles.check(settings)


@pytest.mark.integration
def test_keyword_only_over_grpc(stub, auth):
    ids = {}
    for lang, text in CORPUS.items():
        ids[lang] = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=text, namespace="multilingual")),
                               metadata=auth, timeout=60).id
    for lang, query in QUERIES.items():
        events = list(stub.Retrieve(pb.RetrieveRequest(text=query, top_k=3, profile="keywords",
                                                       filters=pb.RetrieveFilters(namespaces=["multilingual"])),
                                    metadata=auth, timeout=60))
        results = [e.result.memory.id for e in events if e.WhichOneof("event") == "result"]
        stage = next(e.stage for e in events if e.WhichOneof("event") == "stage")
        assert results[:1] == [ids[lang]], (lang, stage.detail)
        assert stage.stage == "keywords" and stage.detail.startswith("keywords=")
