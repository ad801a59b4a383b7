"""Several models behind one server: which model translates a pair, loaded when first asked.

    models = Models([Model.read(["runs/de-en/best"]), Model.read(["runs/en-de/best"])], load, cfg)
    route = models.route("de", "fr")                 # de->en with one model, en->fr with another
    answers, route = await models.translate(asked, answer, client)

Every model says which languages it reads and writes by its own names (a model trained by nmt:
its data's `src_lang` and target languages; an imported NLLB-200: `deu_Latn`, ...; mBART-50:
`de_DE`); a request's languages, in whatever code its API speaks (`de`, `DE`, `EN-US`), reach
them through the one table of language codes (`nmt.language_codes`). A pair is served by the
first model, in the order given, that reads the source and writes the target; when none does,
by two models chained through a language the first writes and the second reads (English first),
and the route says so. A server of one model routes nothing: its requests reach it as they
came, and the model itself checks their languages, as a server of one checkpoint always has.

Each model is a `Server` of its own (its own batcher and worker: one pair's load does not stall
another's), loaded on its first request, in a thread; at most `max_loaded` stay loaded, and the
one used least recently among those no request is using leaves first.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Hashable
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool

from nmt.checkpoint import CKPT_FILE, CONFIG_FILE
from nmt.config import TextFormat
from nmt.errors import NMTError
from nmt.language_codes import name, resolve, tag
from nmt.run_config import ServeRunConfig, load_run_config
from nmt.serving.memory import Memories
from nmt.serving.server import Answer, Asked, Server
from nmt.translation.language_id import Guess, detect
from nmt.translation.request import Segment
from nmt.translation.translator import Translation

log = logging.getLogger(__name__)

PIVOT_FIRST = "en"  # of the languages two models share, the one tried first


class Unserved(NMTError):
    """A language (or pair) no model of the server reads or writes: `language` is the code as
    asked (None: a pair of known languages that no route joins)."""

    def __init__(self, message: str, language: str | None = None) -> None:
        super().__init__(message)
        self.language = language


@dataclasses.dataclass(frozen=True)
class Model:
    """One model of the server: its checkpoints (one, or an ensemble's members) and the
    languages it reads and writes, by its own names, read from its config alone."""

    name: str  # its first checkpoint's directory, as given
    ckpts: tuple[str, ...]
    sources: tuple[str, ...]
    targets: tuple[str, ...]
    codes: bool  # it reads a code for its source language (src_lang is passed on)

    @classmethod
    def read(cls, ckpts: list[str]) -> Model:
        """The model of `ckpts`, from its first checkpoint's config.yaml (no weights read: a
        server of fifty models learns their languages at once)."""
        path = Path(ckpts[0])
        if path.name == CKPT_FILE:
            path = path.parent
        if not path.exists():
            raise NMTError(f"checkpoint not found: {path}")
        if not (path / CONFIG_FILE).is_file():
            raise NMTError(f"{path} is not a checkpoint directory (no {CONFIG_FILE} in it)")
        data = load_run_config(path / CONFIG_FILE).data
        if data.language_codes:  # an NLLB-200, M2M-100, mBART-50 import: any of its codes
            names = tuple(data.language_codes)
            return cls(str(path), tuple(ckpts), names, names, True)
        sources, targets = tuple(data.source_languages()), tuple(data.target_tags())
        return cls(str(path), tuple(ckpts), sources, targets, False)


@dataclasses.dataclass(frozen=True)
class Hop:
    """One model's part of a route, with the languages it is asked for by its own names (None:
    as the request gave them, for a server of one model; or not said)."""

    model: Model
    src_lang: str | None
    tgt_lang: str | None


@dataclasses.dataclass(frozen=True)
class Route:
    """How a pair is translated: one hop, or two through `pivot` (a language tag)."""

    hops: tuple[Hop, ...]
    source: str | None  # the tags of the pair (None: not said)
    target: str | None
    pivot: str | None = None  # the tag of the language between two hops


class TextAnswer:
    """The first hop of a chain answers plain texts, which the second translates."""

    def translation(self, t: Translation, segment: Segment) -> str:
        return t.text

    def document(self, source: str, result: Any) -> str:
        return result.text

    def memory(self, source: str, text: str) -> str:
        return text


class Models:
    """The server's models (see the module's notes): `load` makes a model's `Server` (in a
    thread: it reads the weights); `cfg` the server's settings (its limits, max_loaded)."""

    def __init__(
        self, models: list[Model], load: Callable[[Model], Server], cfg: ServeRunConfig
    ) -> None:
        if not models:
            raise NMTError("no model to serve: give ckpt=DIR or models=[DIR,...]")
        self.models = models
        self.memories = Memories(cfg.tm) if cfg.tm is not None else None
        self._load = load
        self.cfg = cfg
        self.max_loaded = cfg.max_loaded
        self._loaded: collections.OrderedDict[str, Server] = collections.OrderedDict()
        self._using: collections.Counter[str] = collections.Counter()
        self._locks = {m.name: asyncio.Lock() for m in models}
        # each model's languages as tags, and back to its own names
        self._sources = [{tag(n): n for n in m.sources} for m in models]
        self._targets = [{tag(n): n for n in m.targets} for m in models]

    def add_loaded(self, model: Model, server: Server) -> None:
        """A model loaded before serving (the first ones, so that a broken checkpoint fails
        before the server listens and the first requests wait for no load)."""
        self._loaded[model.name] = server

    @property
    def loaded(self) -> list[Server]:
        return list(self._loaded.values())

    # --- which model translates a pair --------------------------------------------------------

    def route(self, src: str | None, tgt: str | None) -> Route:
        """The route from `src` into `tgt` (codes as an API gave them; None: not said). A
        `Unserved` names what no model reads or writes, and what the server serves."""
        if len(self.models) == 1:  # the model checks its languages itself, as it always has
            model = self.models[0]
            if src is not None and not model.codes:  # src_lang only chose the model
                if _match(tag(src), self._sources[0]) is None:
                    said = f"it translates from {_listed(self.source_tags())}"
                    raise Unserved(f"{src} is not a source language of this server: {said}", src)
                src = None
            return Route((Hop(model, src, tgt),), src, tgt)
        if tgt is None:
            raise Unserved(f"say which language to translate into: {self._targets_said()}")
        src_tag = None if src is None else self._known(src, self._sources, "source")
        tgt_tag = self._known(tgt, self._targets, "target")
        for i in range(len(self.models)):
            hop = self._hop(i, src_tag, tgt_tag)
            if hop is not None:
                return Route((hop,), src_tag, tgt_tag)
        if src_tag is not None:
            chain = self._chain(src_tag, tgt_tag)
            if chain is not None:
                return chain
        shown = f"{src_tag}->{tgt_tag}" if src_tag else f"into {tgt_tag}"
        raise Unserved(f"no model translates {shown}; this server translates {self.pairs_said()}")

    def _hop(self, i: int, src: str | None, tgt: str) -> Hop | None:
        """Model i's hop from tag `src` (None: any) into tag `tgt`, if it has one."""
        model, sources, targets = self.models[i], self._sources[i], self._targets[i]
        src_name = None if src is None else _match(src, sources)
        tgt_name = _match(tgt, targets)
        if tgt_name is None or (src is not None and src_name is None) or src == tgt:
            return None
        return Hop(model, src_name if model.codes else None, tgt_name)

    def _chain(self, src: str, tgt: str) -> Route | None:
        """Two hops through a language the first model writes and the second reads."""
        firsts = [i for i in range(len(self.models)) if _match(src, self._sources[i])]
        middles = {t for i in firsts for t in self._targets[i] if t not in (src, tgt)}
        for pivot in sorted(middles, key=lambda t: (t != PIVOT_FIRST, t)):
            for i in firsts:
                first = self._hop(i, src, pivot)
                if first is None:
                    continue
                for j in range(len(self.models)):
                    second = self._hop(j, pivot, tgt) if j != i else None
                    if second is not None:
                        return Route((first, second), src, tgt, pivot)
        return None

    def _known(self, code: str, sides: list[dict[str, str]], side: str) -> str:
        """The tag of `code` when some model has it on `side`; else `Unserved`."""
        asked = tag(code)
        if any(_match(asked, names) for names in sides):
            return _match_tag(asked, sides)
        raise Unserved(
            f"{code} is not a {side} language of this server: it translates from "
            f"{_listed(self.source_tags())} into {_listed(self.target_tags())}",
            code,
        )

    def source_tags(self) -> list[str]:
        return list(dict.fromkeys(t for names in self._sources for t in names))

    def target_tags(self) -> list[str]:
        return list(dict.fromkeys(t for names in self._targets for t in names))

    def languages(self) -> dict[str, list[str]]:
        """Each source tag and the target tags it reaches, in one hop or through a pivot."""
        direct: dict[str, set[str]] = collections.defaultdict(set)
        for sources, targets in zip(self._sources, self._targets):
            for s in sources:
                direct[s].update(t for t in targets if t != s)
        reach = {}
        for s, targets in direct.items():
            further = {u for t in targets for u in direct.get(t, ())}
            reach[s] = sorted((targets | further) - {s})
        return reach

    def pairs_said(self) -> str:
        pairs = [f"{s}->{t}" for s, ts in self.languages().items() for t in ts]
        return _listed(pairs)

    def _targets_said(self) -> str:
        return f"this server translates into {_listed(self.target_tags())}"

    def detect(self, texts: list[str]) -> Guess | None:
        """The language of `texts`, read together (`nmt.translation.language_id`), as a tag;
        None for blank texts. Unsure between a language served and one not, the served one
        wins; a language no model reads is `Unserved`, naming it and what is served."""
        served = self.source_tags()
        among = {t.split("-")[0] for t in served}
        guess = detect(" ".join(texts), among=among)
        if guess is None:
            return None
        found = tag(guess.language)
        if found.split("-")[0] not in among:
            raise Unserved(
                f"the text looks {name(found)} ({found}, {guess.confidence:.0%} sure), and this "
                f"server translates from {_listed(served)}", found,
            )  # fmt: skip
        return dataclasses.replace(guess, language=found)

    # --- translating --------------------------------------------------------------------------

    async def translate(
        self, asked: Asked, answer: Answer, client: Hashable = None
    ) -> tuple[list, Route]:
        """Each text of `asked` translated along its route and written by `answer`; the second
        hop of a chain translates the first's texts (its answers' "source" is the pivot text)."""
        request = asked.request
        route = self.route(request.src_lang, request.tgt_lang)
        found = await self._remembered(asked, route)
        if not found:
            return await self._along(asked, answer, client, route), route
        out = [answer.memory(request.texts[i], text) for i, text in found.items()]
        rest = [i for i in range(len(request.texts)) if i not in found]
        if rest:  # the others searched as a request of their own
            fewer = dataclasses.replace(request, texts=[request.texts[i] for i in rest])
            searched = await self._along(dataclasses.replace(asked, request=fewer), answer,
                                         client, route)  # fmt: skip
            out += searched
        order = [*found, *rest]
        return [out[order.index(i)] for i in range(len(request.texts))], route

    async def _remembered(self, asked: Asked, route: Route) -> dict[int, str]:
        """Index -> translation of each text the memory holds for the route's pair: plain texts
        only (a text with markup, a prefix or constraints is searched), whole texts."""
        request, options = asked.request, asked.options
        plain = options is None or options.format in (TextFormat.text, TextFormat.auto)
        if self.memories is None or not plain or request.prefixes or request.constraints:
            return {}
        model = route.hops[0].model
        src = route.source or (model.sources[0] if len(model.sources) == 1 else None)
        tgt = route.target or (model.targets[0] if len(model.targets) == 1 else None)
        if src is None or tgt is None:
            return {}
        memory = await run_in_threadpool(self.memories.pair, tag(src), tag(tgt))
        if memory is None:
            return {}
        return {i: t for i, text in enumerate(request.texts) if (t := memory.lookup(text))}

    async def _along(self, asked: Asked, answer: Answer, client: Hashable, route: Route) -> list:
        """Each text of `asked` translated along `route`, written by `answer`."""
        request = asked.request
        texts = request.texts
        for k, hop in enumerate(route.hops):
            last = k == len(route.hops) - 1
            hop_request = dataclasses.replace(
                request, texts=texts, src_lang=hop.src_lang, tgt_lang=hop.tgt_lang
            )
            async with self.using(hop.model) as server:
                found = await server.translate(
                    dataclasses.replace(asked, request=hop_request),
                    answer if last else TextAnswer(), client,
                )  # fmt: skip
            texts = found
        return texts

    @contextlib.asynccontextmanager
    async def using(self, model: Model) -> AsyncIterator[Server]:
        """`model`'s server, loaded if it is not, kept loaded while the block runs."""
        self._using[model.name] += 1
        try:
            yield await self.server(model)
        finally:
            self._using[model.name] -= 1

    async def server(self, model: Model) -> Server:
        """`model`'s server: loaded now if it is not (one load at a time per model), the least
        recently used idle ones leaving beyond max_loaded."""
        server = self._loaded.get(model.name)
        if server is None:
            async with self._locks[model.name]:
                server = self._loaded.get(model.name)
                if server is None:
                    log.info("loading %s", model.name)
                    server = await run_in_threadpool(self._load, model)
                    self._loaded[model.name] = server
                    self._evict()
        self._loaded.move_to_end(model.name)
        return server

    def _evict(self) -> None:
        idle = [n for n in self._loaded if not self._using[n]]
        while len(self._loaded) > self.max_loaded and idle:
            name = idle.pop(0)
            log.info("unloading %s (max_loaded=%d)", name, self.max_loaded)
            self._loaded.pop(name).close()

    def close(self) -> None:
        for server in self._loaded.values():
            server.close()
        self._loaded.clear()


def _match(asked: str, names: dict[str, str]) -> str | None:
    """The model's own name for tag `asked` (`names`: tag -> name), None when it has none."""
    if asked in names:
        return names[asked]
    try:
        return resolve(asked, list(names.values()))
    except NMTError:
        return None


def _match_tag(asked: str, sides: list[dict[str, str]]) -> str:
    """`asked` as the tag the models know it by (`de-DE` -> `de` where the models say `de`)."""
    for names in sides:
        name = _match(asked, names)
        if name is not None:
            return tag(name)
    return asked


def _listed(items: list[str], most: int = 12) -> str:
    shown = ", ".join(items[:most])
    return shown + (f", ... ({len(items)} in all)" if len(items) > most else "")
