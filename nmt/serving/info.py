"""GET /info: what the server runs, for people and for pages: the model (family, sizes,
attention maps), its languages (the "tgt_lang" and "src_lang" values a request may give), its
vocabularies, decoding defaults, step and validation, the device; for an ensemble its members and
whose attention the answers carry; the server's limits. The server adds its batching counts at
each request (`nmt.serving.app`).
"""

from __future__ import annotations

from nmt.checkpoint import Checkpoint
from nmt.config import RNNConfig, TransformerConfig
from nmt.language_codes import tag
from nmt.run_config import ServeRunConfig, TrainRunConfig, flatten
from nmt.serving.http import number
from nmt.serving.keys import Keys
from nmt.serving.models import Models
from nmt.translation.translator import Translator

# the settings of a server that /info reports under "limits"
LIMITS = (
    "max_chars", "max_texts", "max_beam", "max_request_cost", "max_batch", "batch_cost",
    "max_queue", "max_queue_cost", "client_share", "batch_wait_ms",
)  # fmt: skip


def describe(translator: Translator, ckpts: list[Checkpoint], cfg: ServeRunConfig) -> dict:
    """What GET /info says of the model. An ensemble is described by its
    first member (data, languages, step), with every member's path under "ensemble" and the
    attention it shows."""
    info = describe_model(translator, ckpts[0].config, ckpts[0].payload)
    if len(ckpts) > 1:
        info["ensemble"] = [str(c.path) for c in ckpts]
        info.update(ensemble_attention(translator, ckpts, cfg.attention_member))
    return info


def limits(cfg: ServeRunConfig) -> dict:
    """A server's limits, as /info reports them."""
    return {k: getattr(cfg, k) for k in LIMITS}


def ensemble_attention(translator: Translator, ckpts: list[Checkpoint], shown: str | int) -> dict:
    """What /info says of the attention an ensemble's answers carry (`ensemble_attention`, see
    nmt/models/ensemble.py): "ensemble_attention" {"shown": "mean" or the member's index from 0,
    "members": K, and for the mean "averaged": the members with attention, the ones it averages},
    and "attention_maps" for those maps rather than the first member's: the mean is one map (each
    member's layers and heads are averaged first), a member's are its own layers and heads."""
    maps = [describe_model(translator, c.config, c.payload)["attention_maps"] for c in ckpts]
    if shown == "mean":
        averaged = sum(m is not None for m in maps)
        one = {"layers": 1, "heads": 1} if averaged else None
        return {
            "ensemble_attention": {"shown": "mean", "members": len(ckpts), "averaged": averaged},
            "attention_maps": one,
        }
    index = int(shown) % len(ckpts)  # ensemble_attention=-1: the last member
    return {
        "ensemble_attention": {"shown": index, "members": len(ckpts)},
        "attention_maps": maps[index],
    }


def describe_model(translator: Translator, run: TrainRunConfig, payload: dict) -> dict:
    """What GET /info reports: the checkpoint's model, data, vocabularies and validation."""
    model = run.model
    if isinstance(model, TransformerConfig):
        arch = {"scorer": "scaled_dot", "heads": model.heads, "d_model": model.d_model}
        maps = (model.decoder_layers, model.heads)
    else:
        assert isinstance(model, RNNConfig)
        arch = {
            "scorer": model.attention.value,
            "decoder": model.decoder.value,
            "cell": model.cell.value,
            "hidden_size": model.hidden_size,
            "bidirectional": model.bidirectional,
        }
        heads = model.heads if model.attention.value == "multihead" else 1
        maps = None if model.attention.value == "none" else (1, heads)
    metrics = payload.get("metrics") or {}
    return {
        "family": model.arch,
        **arch,
        "encoder_layers": model.encoder_layers,
        "decoder_layers": model.decoder_layers,
        "attention_maps": None if maps is None else {"layers": maps[0], "heads": maps[1]},
        "parameters": sum(p.numel() for p in translator.model.parameters()),
        "languages": {"source": run.data.src_lang, "target": run.data.tgt_lang},
        # the "tgt_lang" values a request may give (TargetTags.languages): a model trained with
        # target tags lists each tagged language, one without lists its data.tgt_lang alone
        "target_languages": translator.tags.languages,
        # the "src_lang" values a request may give: a model with language codes (an NLLB-200,
        # M2M-100 or mBART-50 import) lists them; the others take none
        "source_codes": translator.tags.source_codes,
        # the languages it was trained to read: several for a many-to-one model, no tag needed
        "source_languages": run.data.source_languages(),
        "data": run.data.name,
        "vocabulary": {
            "source": len(translator.vocabs.src),
            "target": len(translator.vocabs.tgt),
            "joint": translator.vocabs.joint,
        },
        "decode": flatten(translator.decode),
        "step": payload.get("step"),
        "validation": {
            "bleu": number(metrics["bleu"]) if "bleu" in metrics else None,
            "loss": number(metrics["loss"]) if "loss" in metrics else None,
            "decode": run.decode.describe() if "bleu" in metrics else None,
        },
        "device": str(translator.device),
    }


def served(models: Models, keys: Keys) -> dict:
    """What /info says of the server's models (each with its languages as tags, and the pairs
    they reach, a pivot included: `nmt.serving.models`) and whether requests need a key."""
    return {
        "models": [
            {
                "name": m.name,
                "sources": [tag(s) for s in m.sources],
                "targets": [tag(t) for t in m.targets],
            }  # fmt: skip
            for m in models.models
        ],
        "pairs": models.languages(),
        "keys_required": keys.required,
    }
