"""The one table of language codes (nmt.language_codes): every kind of code read as one BCP 47 tag,
a user's code resolved to each model's own name for the language (NLLB-200's FLORES-200 codes,
mBART-50's locales, M2M-100's ISO 639-1, a trained model's data names), and the two places that
read a language through it: `TargetTags` (every translator's tgt_lang / src_lang) and
`inherit_codes` (fine-tuning an import on data named `de`, `en`). tests/test_m2m100_import.py
translates with an imported model by such codes, end to end."""

from __future__ import annotations

import pytest

from nmt.config import DataConfig
from nmt.data.languages import inherit_codes
from nmt.errors import NMTError
from nmt.language_codes import matches, name, resolve, tag
from nmt.pretrained.m2m100 import M2M100_LANGUAGES
from nmt.tokenizer import SPECIAL_PIECES, UNK
from nmt.translation.inputs import TargetTags


def nllb_codes() -> list[str]:
    """NLLB-200's 202 FLORES-200 codes, as transformers' tokenizer lists them."""
    module = pytest.importorskip("transformers.models.nllb.tokenization_nllb")
    return list(module.FAIRSEQ_LANGUAGE_CODES)


def mbart50_codes() -> list[str]:
    """mBART-50's 52 locales ("de_DE", "en_XX")."""
    module = pytest.importorskip("transformers.models.mbart50.tokenization_mbart50")
    return list(module.FAIRSEQ_LANGUAGE_CODES)


@pytest.mark.parametrize(
    "code, want",
    [
        ("DE", "de"), ("de", "de"), ("EN-US", "en-US"), ("deu", "de"), ("deu_Latn", "de"),
        ("de_DE", "de-DE"), ("en_XX", "en"), ("zho_Hant", "zh-Hant"), ("ZH-HANS", "zh-Hans"),
        ("zho_Hans", "zh-Hans"), ("cmn", "zh"), ("arb", "ar"), ("arb_Arab", "ar"),
        ("PT-BR", "pt-BR"), ("pt-br", "pt-BR"), ("iw", "he"), (" fr ", "fr"),
        ("srp_Cyrl", "sr-Cyrl"),
        # what langcodes cannot read comes back as given, lower-cased, never an exception
        ("__de__", "__de__"), ("Klingon", "klingon"), ("", ""), ("und", "und"),
        ("x" * 40, "x" * 40),
    ],
)  # fmt: skip
def test_every_kind_of_code_is_one_tag(code, want):
    assert tag(code) == want


@pytest.mark.parametrize(
    "asked, want",
    [
        ("de", "deu_Latn"), ("DE", "deu_Latn"), ("deu", "deu_Latn"), ("de-DE", "deu_Latn"),
        ("en", "eng_Latn"), ("EN-US", "eng_Latn"), ("EN-GB", "eng_Latn"), ("fr", "fra_Latn"),
        # Chinese: the likely script decides when none is named, a region implies one
        ("zh", "zho_Hans"), ("ZH-HANS", "zho_Hans"), ("zh-Hant", "zho_Hant"), ("zh-TW", "zho_Hant"),
        ("pt-BR", "por_Latn"), ("PT-PT", "por_Latn"), ("ar", "arb_Arab"), ("he", "heb_Hebr"),
        ("sr", "srp_Cyrl"), ("fa", "pes_Arab"), ("fa-AF", "prs_Arab"), ("nb", "nob_Latn"),
        # twi_Latn and aka_Latn are both Akan: the language before folding decides
        ("twi", "twi_Latn"), ("ak", "aka_Latn"), ("deu_Latn", "deu_Latn"),
    ],
)  # fmt: skip
def test_codes_reach_nllb_names(asked, want):
    assert resolve(asked, nllb_codes()) == want


@pytest.mark.parametrize(
    "asked, want",
    [
        ("de", "de_DE"), ("en", "en_XX"), ("EN-US", "en_XX"), ("fr", "fr_XX"), ("zh", "zh_CN"),
        ("ZH-HANS", "zh_CN"), ("pt-BR", "pt_XX"), ("ar", "ar_AR"), ("deu_Latn", "de_DE"),
        ("eng_Latn", "en_XX"), ("iw", "he_IL"),
    ],
)  # fmt: skip
def test_codes_reach_mbart50_names(asked, want):
    assert resolve(asked, mbart50_codes()) == want


@pytest.mark.parametrize(
    "asked, want",
    [
        ("DE", "de"), ("deu_Latn", "de"), ("EN-US", "en"), ("eng_Latn", "en"), ("zho_Hans", "zh"),
        ("ZH", "zh"), ("pt-BR", "pt"), ("arb_Arab", "ar"), ("srp_Cyrl", "sr"), ("iw", "he"),
    ],
)  # fmt: skip
def test_codes_reach_m2m100_names(asked, want):
    assert resolve(asked, M2M100_LANGUAGES) == want


def test_a_model_without_the_language_or_its_script_is_named():
    """Nothing matches: the message names the key, what was asked, and the model's names, those of
    the same language first; a script asked for is never swapped for another."""
    with pytest.raises(NMTError, match=r"src_lang='xx': this model's languages are codes such as"):
        resolve("xx", nllb_codes(), "src_lang")
    with pytest.raises(NMTError, match=r"tgt_lang='zh-Hant': .* such as zh_CN, ar_AR"):
        resolve("zh-Hant", mbart50_codes())
    with pytest.raises(NMTError, match=r"tgt_lang='sr-Latn': .* such as sr, af"):
        resolve("sr-Latn", M2M100_LANGUAGES)
    with pytest.raises(NMTError, match=r"tgt_lang='klingon'"):
        resolve("klingon", ["de", "en"])
    assert matches("cs", ["aa", "bb"]) == []


def test_what_the_table_cannot_choose_is_named():
    """Two names of one language that differ in nothing asked: an NMTError naming both."""
    with pytest.raises(NMTError, match=r"tgt_lang='de-DE' may mean de, deu: say which"):
        resolve("de-DE", ["de", "deu", "fr"])
    assert resolve("DE", ["de", "deu", "fr"]) == "de"  # spelled as one of them
    with pytest.raises(NMTError, match=r"src_lang='en' may mean en-GB, en-AU"):
        resolve("en", ["en-GB", "en-AU"], "src_lang")
    # the language's likely region settles it where a model has it
    assert resolve("en", ["en-GB", "en-US"]) == "en-US"
    assert resolve("EN-GB", ["en-US", "en-GB"]) == "en-GB"


def test_odd_names_match_only_as_spelled():
    """A model's name that langcodes cannot read is found by its spelling, case and _/- aside."""
    names = ["klingon", "__de__", "en_XX"]
    assert resolve("KLINGON", names) == "klingon"
    assert resolve("__DE__", names) == "__de__"
    assert resolve("EN-xx", names) == "en_XX"
    assert resolve("en", names) == "en_XX"


def test_names_are_english_display_names():
    assert name("deu_Latn") == "German"
    assert name("zho_Hans") == "Chinese (Simplified)"
    assert name("ZH-HANT") == "Chinese (Traditional)"
    assert name("EN-US") == "English (United States)"
    assert name("el") == "Modern Greek"  # the registry's note "(1453-)" left out
    assert name("sr_Cyrl") == "Serbian (Cyrillic)"
    assert name("__de__") == "__de__" and name("qqq") == "qqq"


class Pieces:
    """What TargetTags reads of a vocabulary: pieces' ids and back."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = [*SPECIAL_PIECES, *pieces]

    def piece_to_id(self, piece: str) -> int:
        return self.pieces.index(piece) if piece in self.pieces else UNK

    def id_to_piece(self, ids: list[int]) -> list[str]:
        return [self.pieces[i] for i in ids]


NLLB_PIECES = ["deu_Latn", "eng_Latn", "fra_Latn", "zho_Hans", "zho_Hant"]


def test_target_tags_read_any_code_of_a_models_language():
    """A model with language codes (an NLLB import, a run fine-tuned from it whose data says `de`):
    `de` is deu_Latn's id, as src_lang and tgt_lang, at load and per call; its own names work as
    before; an unknown one names the codes."""
    vocab = Pieces(NLLB_PIECES)
    codes = {c: c for c in NLLB_PIECES} | {"de": "deu_Latn"}  # a fine-tuned run's name beside
    ids = {c: vocab.piece_to_id(c) for c in NLLB_PIECES}
    tags = TargetTags({"eng_Latn": None}, vocab, codes, source="de-DE")
    assert tags.ids(None) == [ids["deu_Latn"]] and tags.forced(None) == [ids["eng_Latn"]]
    for asked, own in (("DE", "deu_Latn"), ("fr", "fra_Latn"), ("zh", "zho_Hans"),
                       ("ZH-HANT", "zho_Hant"), ("EN-US", "eng_Latn")):  # fmt: skip
        assert tags.forced(asked) == tags.forced(own) == [ids[own]]
        assert tags.ids(asked, asked) == tags.ids(own, own) == [ids[own]]
    assert tags.languages == [*NLLB_PIECES, "de"] and tags.source_codes == tags.languages
    with pytest.raises(NMTError, match="tgt_lang='xx': this model's languages are codes such as"):
        tags.forced("xx")
    with pytest.raises(NMTError, match="src_lang='xx': this model's languages are codes such as"):
        TargetTags({"eng_Latn": None}, vocab, codes, source="xx")


def test_target_tags_read_any_code_of_a_tagged_language():
    """A model trained with target tags for `en` and `fr` (its data's names): `EN-US` asks for
    en's tag; a model without tags takes its one language's codes; the messages are as before."""
    vocab = Pieces(["<2en>", "<2fr>"])
    tags = TargetTags({"en": "<2en>", "fr": "<2fr>"}, vocab)
    for asked, own in (("EN-US", "en"), ("eng", "en"), ("fr-CA", "fr"), ("fra_Latn", "fr")):
        assert tags.ids(asked) == tags.ids(own) == [vocab.piece_to_id(f"<2{own}>")]
    with pytest.raises(NMTError, match="tgt_lang='cs': this model translates into en, fr$"):
        tags.ids("cs")
    with pytest.raises(NMTError, match="say which with tgt_lang"):
        tags.ids(None)
    one = TargetTags({"de": None}, vocab)
    assert one.ids("DE-AT") == one.ids("de") == []
    with pytest.raises(NMTError, match="tgt_lang='fr': this model translates into de$"):
        one.ids("fr")


def data(src: str = "de", tgt: str = "en", **codes: str) -> DataConfig:
    return DataConfig(name="run", src_lang=src, tgt_lang=tgt, local_dir=".", language_codes=codes)


def test_fine_tuning_data_finds_the_models_codes(caplog):
    """A run's data in `de` -> `en` from an NLLB import takes deu_Latn and eng_Latn (logged); its
    own data.language_codes win; a language the table cannot place is refused as before."""
    stored = data("deu_Latn", "eng_Latn", **{c: c for c in nllb_codes()})
    run = data()
    with caplog.at_level("INFO", logger="nmt.data.languages"):
        inherit_codes(run, stored, "ckpt")
    assert (run.language_codes["de"], run.language_codes["en"]) == ("deu_Latn", "eng_Latn")
    assert "language 'de' of the data is deu_Latn" in caplog.text
    own = data(de="gsw_Latn")  # a dialect, mapped by hand
    inherit_codes(own, stored, "ckpt")
    assert (own.language_codes["de"], own.language_codes["en"]) == ("gsw_Latn", "eng_Latn")
    m2m = data("deu", "pt-BR")  # M2M-100's "__de__" codes, named "de"
    inherit_codes(m2m, data(**{lang: f"__{lang}__" for lang in M2M100_LANGUAGES}), "m2m")
    assert (m2m.language_codes["deu"], m2m.language_codes["pt-BR"]) == ("__de__", "__pt__")
    with pytest.raises(NMTError, match=r"language 'xx' of the data has no code .* "
                       r"\+data.language_codes.xx=CODE"):  # fmt: skip
        inherit_codes(data("xx"), stored, "ckpt")
    with pytest.raises(NMTError, match=r"language 'en' of the data may be any of en_GB, en_AU"):
        inherit_codes(data(), data(de_DE="de_DE", en_GB="en_GB", en_AU="en_AU"), "ckpt")
