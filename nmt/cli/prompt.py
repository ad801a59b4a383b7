"""nmt-translate's interactive prompt: a line typed is translated and shown with its n-best and
attention; `/prefix TEXT` forces a prefix ("what if"), `/include` and `/avoid` set phrases every
translation must contain or must not, `/tree` prints the search tree of the last sentence. A
line of several sentences, markup, protected spans or columns asked for is translated as a pipe
gives it (`nmt.cli.lines`).
"""

from __future__ import annotations

import contextlib
import re
import sys
from dataclasses import replace

from nmt.cli.lines import LineFormat, text_lines
from nmt.config import DecodeConfig, TextFormat
from nmt.documents.sentences import split
from nmt.documents.texts import read_block
from nmt.errors import NMTError
from nmt.run_config import TranslateRunConfig
from nmt.translation.attention_map import format_attention, save_heatmap
from nmt.translation.confidence import for_checkpoint, search_kind
from nmt.translation.phrases import constraint_ids
from nmt.translation.request import Request
from nmt.translation.search.tree import BeamTree
from nmt.translation.translator import Translation, Translator, raise_failure

REPL_HELP = """Type a sentence and press Enter; Ctrl-C cancels, Ctrl-D quits. Commands:
  /prefix TEXT   translations start with TEXT (the last sentence is translated again from it)
  /prefix        no prefix
  /include A; B  translations contain the phrases A and B (decode=beam; the last sentence again)
  /include       no phrases to include
  /avoid A; B    translations never contain the phrases A or B (the last sentence again)
  /avoid         no phrases to avoid
  /show          the prefix and the phrases in force
  /tree          the search tree of the last sentence (decode=beam shows the whole beam)
  /help          these lines
A line that starts with "/" and a word is a command; any other line is translated."""
COMMANDS = ("/prefix", "/include", "/avoid", "/show", "/tree", "/help")
# what a command looks like: "/" and letters; "/usr/bin ist ein Ordner." is text
COMMAND = re.compile(r"/[A-Za-z]+")


def _phrases(argument: str) -> list[str]:
    """The phrases of `/include A; B` or `/avoid A; B`: split at semicolons, blanks left out."""
    return [p.strip() for p in argument.split(";") if p.strip()]


def _describe(prefix: str, include: list[str], avoid: list[str]) -> str:
    """The settings `/show` prints, one line."""
    shown = [
        f"prefix: {prefix!r}" if prefix else "no prefix",
        f"include: {'; '.join(include)}" if include else "nothing to include",
        f"avoid: {'; '.join(avoid)}" if avoid else "nothing to avoid",
    ]
    return f"({', '.join(shown)})"


def _check_phrases(
    translator: Translator, decode: DecodeConfig, include: list[str], avoid: list[str]
) -> None:
    """Raise NMTError for phrases that no sentence could take under `decode` (constraints
    without beam search, a piece the target vocabulary lacks, a phrase to avoid that no
    translation could hold), as soon as they are typed; what depends on the sentence (its length
    limit, a search that finds no way) is known when it is translated."""
    translator.prepare(Request([""], decode, banned=avoid, constraints=[include]), warn=False)
    for phrase in include:
        constraint_ids(translator.vocabs.tgt, phrase)


def repl(translator: Translator, cfg: TranslateRunConfig) -> None:
    """Translate what is typed, as Python's own prompt behaves: arrow keys and history (when the
    readline module exists), Ctrl-C drops the line being typed or stops the translation under way
    and returns to the prompt, Ctrl-D on an empty line quits. A line starting with one of the
    commands of REPL_HELP is that command. The prefix and the phrases start as cfg.decode's
    (decode.prefix, decode.constraints, decode.banned), and each command replaces its own."""
    # importing readline is what gives input() line editing and history; where it is missing
    # (Windows, a Python built without it) plain input() still works
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401
    print(REPL_HELP, file=sys.stderr)
    calibration = for_checkpoint(cfg.ckpts[0], search_kind(cfg.decode)) if cfg.confidence else None
    text_format = LineFormat(tgt_lang=cfg.tgt_lang, text=cfg, calibration=calibration)
    typed = 0  # numbers the sentences in length warnings
    last, prefix = "", cfg.decode.prefix
    include, avoid = list(cfg.decode.constraints), list(cfg.decode.banned)
    # `/avoid` and `/include` replace decode.banned and decode.constraints: the calls give them
    decode = replace(translator.decode, banned=[], constraints=[])
    while True:
        try:
            line = input("> ")
        except EOFError:
            print(file=sys.stderr)
            return
        except KeyboardInterrupt:
            print(file=sys.stderr)
            continue
        command, _, argument = line.strip().partition(" ")
        tree, previous = command == "/tree", (prefix, include, avoid)
        if command in ("/prefix", "/include", "/avoid"):
            if command == "/prefix":
                prefix = argument.strip()
                print(f"(prefix: {prefix!r})" if prefix else "(no prefix)", file=sys.stderr)
            else:
                if command == "/include":
                    include = _phrases(argument)
                else:
                    avoid = _phrases(argument)
                try:
                    _check_phrases(translator, decode, include, avoid)
                except NMTError as err:
                    print(f"nmt: {err}", file=sys.stderr)
                    prefix, include, avoid = previous
                    continue
                print(_describe(prefix, include, avoid), file=sys.stderr)
            if not last:
                continue
            line = last
        elif command == "/show":
            print(_describe(prefix, include, avoid), file=sys.stderr)
            continue
        elif command == "/help" or (COMMAND.fullmatch(command) and command not in COMMANDS):
            if command != "/help":  # a typo of a command is not a sentence to translate
                print(f"(no command {command}: the commands are {', '.join(COMMANDS)})",
                      file=sys.stderr)  # fmt: skip
            print(REPL_HELP, file=sys.stderr)
            continue
        elif tree:
            if not last:
                print("(translate a sentence first)", file=sys.stderr)
                continue
            line = last
        elif not line.strip():
            continue
        else:
            typed += 1
        if not tree and not (prefix or include or avoid) and as_text(translator, cfg, line):
            # a paragraph, markup, or columns asked for: the line as a pipe gives it (sentences
            # split and rejoined, tags placed, alignment and confidence columns), not the one
            # sentence the display below is for
            try:
                print(text_lines(translator, [line], typed, decode, text_format)[0], flush=True)
            except KeyboardInterrupt:
                print("(translation cancelled)", file=sys.stderr)
            except NMTError as err:
                print(f"nmt: {err}", file=sys.stderr)
            last = line
            continue
        try:
            request = Request(
                [line], decode, [prefix], avoid, [include], cfg.tgt_lang, attention=True,
                tree=tree, first_line=typed,
            )  # fmt: skip
            result = raise_failure(translator.run(translator.prepare(request)), request)[0]
        except KeyboardInterrupt:
            # search keeps nothing between calls, so an interrupted one leaves no state behind
            print("(translation cancelled)", file=sys.stderr)
            continue
        except NMTError as err:  # a prefix or phrases the model cannot take: say so, keep the last
            print(f"nmt: {err}", file=sys.stderr)
            prefix, include, avoid = previous
            continue
        last = line
        if tree and result.tree is not None:
            print(format_tree(result.tree))
            continue
        _show(result, cfg, line)


def as_text(translator: Translator, cfg: TranslateRunConfig, line: str) -> bool:
    """Whether a line typed at the prompt is more than the one plain sentence the prompt's own
    display shows (its translation, n-best, attention): several sentences (split_sentences),
    markup (format), protected spans (a URL, a number: kept verbatim, as in a pipe), or
    alignment or confidence columns asked for."""
    if cfg.alignments or cfg.confidence or cfg.format not in (TextFormat.text, TextFormat.auto):
        return True
    if read_block(line.strip(), TextFormat.text, cfg).codes:
        return True
    parts = split(line, translator.facts.language or "", translator.facts.starts)
    return cfg.split_sentences and len(parts.sentences) > 1


def _show(result: Translation, cfg: TranslateRunConfig, line: str) -> None:
    print(result.text, flush=True)
    if result.prefix_score is not None:
        print(f"  (prefix: {result.prefix_pieces} pieces, log-prob {result.prefix_score:.4f})")
    if len(result.nbest) > 1:
        for rank, (text, score) in enumerate(result.nbest, 1):
            print(f"  {rank:>2}  {score:8.4f}  {text}")
    weights = result.attention(cfg.attention_layer, cfg.attention_head)
    if weights is None:
        return
    if cfg.show_attention:
        print(format_attention(result.src_pieces, result.tgt_pieces, weights))
    if cfg.attention_png:
        save_heatmap(result.src_pieces, result.tgt_pieces, weights, cfg.attention_png, line)
        print(f"(attention map written to {cfg.attention_png})", file=sys.stderr)


def format_tree(tree: BeamTree) -> str:
    """The tree as indented text, one node per line: piece, cumulative log-probability, state
    (and n-best rank); children in the order the search kept them."""
    children: dict[int, list[int]] = {}
    for i, node in enumerate(tree.nodes):
        children.setdefault(node.parent, []).append(i)
    lines: list[str] = []
    stack = [(i, 0) for i in reversed(children.get(-1, []))]
    while stack:
        i, depth = stack.pop()
        node = tree.nodes[i]
        rank = "" if node.rank is None else f" #{node.rank + 1}"
        label = "<root>" if node.parent < 0 else node.piece
        lines.append(f"{'  ' * depth}{label}  {node.score:.3f}  {node.state}{rank}")
        stack.extend((c, depth + 1) for c in reversed(children.get(i, [])))
    return "\n".join(lines)
