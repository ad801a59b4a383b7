"""Which model translates a pair (nmt/serving/models.py), without loading any: routes by the
language table, pivots through a shared language, a many-language import serving every pair,
the refusals that name what is served, and models loaded on first use within max_loaded."""

from __future__ import annotations

import asyncio

import pytest

from nmt.run_config import ServeRunConfig
from nmt.serving.models import Model, Models, Unserved

NLLB = ("deu_Latn", "eng_Latn", "fra_Latn", "zho_Hans", "zho_Hant")


def model(name: str, sources: tuple, targets: tuple, codes: bool = False) -> Model:
    return Model(name, (name,), sources, targets, codes)


class Stub:
    """A loaded model's server, as far as the router sees it."""

    def __init__(self, name: str) -> None:
        self.name, self.closed = name, False

    def close(self) -> None:
        self.closed = True


def models(*given: Model, max_loaded: int = 4) -> Models:
    cfg = ServeRunConfig(models=[m.name for m in given], max_loaded=max_loaded, device="cpu")
    return Models(list(given), lambda m: Stub(m.name), cfg)


DE_EN = model("de-en", ("de",), ("en",))
EN_FR = model("en-fr", ("en",), ("fr",))
EN_DE = model("en-de", ("en",), ("de",))


def test_a_pair_goes_to_the_first_model_that_serves_it_in_any_spelling():
    served = models(DE_EN, EN_FR, EN_DE)
    for src, tgt in [("de", "en"), ("DE", "EN-US"), ("deu", "en-GB"), ("de-AT", "en")]:
        route = served.route(src, tgt)
        assert [h.model.name for h in route.hops] == ["de-en"] and route.pivot is None
        assert (route.hops[0].src_lang, route.hops[0].tgt_lang) == (None, "en")
    assert served.route(None, "fr").hops[0].model.name == "en-fr"  # source not said


def test_a_pair_no_model_serves_is_chained_through_english_first():
    fr_en = model("fr-en", ("fr",), ("en",))
    de_fr = model("de-fr", ("de",), ("fr",))
    en_es = model("en-es", ("en",), ("es",))
    fr_es = model("fr-es", ("fr",), ("es",))
    route = models(de_fr, fr_en, DE_EN, en_es, fr_es).route("de", "es")
    assert route.pivot == "en" and [h.model.name for h in route.hops] == ["de-en", "en-es"]
    route = models(de_fr, fr_es).route("de", "es")
    assert route.pivot == "fr"
    assert models(DE_EN, EN_FR).languages() == {"de": ["en", "fr"], "en": ["fr"]}


def test_a_many_language_import_serves_every_pair_by_its_own_codes():
    nllb = model("nllb", NLLB, NLLB, codes=True)
    served = models(DE_EN, nllb)
    route = served.route("de", "fr")
    assert route.hops[0].model.name == "nllb"
    assert (route.hops[0].src_lang, route.hops[0].tgt_lang) == ("deu_Latn", "fra_Latn")
    assert served.route("en", "zh").hops[0].tgt_lang == "zho_Hans"  # the usual script
    assert served.route("EN", "ZH-HANT").hops[0].tgt_lang == "zho_Hant"
    assert served.route("de", "en").hops[0].model.name == "de-en"  # the first listed wins
    assert set(served.languages()["de"]) == {"en", "fr", "zh-Hans", "zh-Hant"}


def test_what_no_model_reads_or_writes_is_refused_by_name():
    served = models(DE_EN, EN_FR)
    with pytest.raises(Unserved, match="zz is not a target language .* into en, fr") as refused:
        served.route("de", "zz")
    assert refused.value.language == "zz"
    with pytest.raises(Unserved, match="ja is not a source language .* from de, en"):
        served.route("ja", "en")
    apart = models(DE_EN, model("fr-es", ("fr",), ("es",)))
    with pytest.raises(Unserved, match="no model translates de->es; .* de->en, fr->es"):
        apart.route("de", "es")
    with pytest.raises(Unserved, match="say which language to translate into"):
        served.route("de", None)


def test_a_server_of_one_model_routes_nothing():
    served = models(model("multi", ("de",), ("en", "fr")))
    route = served.route(None, "EN-US")  # the model resolves its own names
    assert route.hops[0].tgt_lang == "EN-US"
    assert served.route("de", None).hops[0].src_lang is None  # the source only chose it
    with pytest.raises(Unserved, match="fr is not a source language"):
        served.route("fr", "en")


def test_models_load_on_first_use_and_the_least_recently_used_idle_one_leaves():
    served = models(DE_EN, EN_FR, EN_DE, max_loaded=2)

    async def use(*names: str) -> list[str]:
        for name in names:
            async with served.using(next(m for m in served.models if m.name == name)):
                pass
        return [s.name for s in served.loaded]

    assert asyncio.run(use("de-en", "en-fr")) == ["de-en", "en-fr"]
    first = served.loaded[0]
    assert asyncio.run(use("de-en", "en-de")) == ["de-en", "en-de"]  # en-fr used least lately
    assert served.loaded[0] is first and not first.closed

    async def busy() -> list[str]:  # a model in use never leaves: the others make room
        async with served.using(DE_EN):
            await served.server(EN_FR)
            return [s.name for s in served.loaded]

    assert asyncio.run(busy()) == ["de-en", "en-fr"]
