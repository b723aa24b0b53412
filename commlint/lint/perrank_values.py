"""Values the per-rank evaluator (`perrank.py`) knows beyond plain Python: a command line's
defaults (`argparse`).

A program's command line is the same on every rank (torchrun hands every rank the same
arguments), so its defaults are uniform values: the sizes, counts and member lists they decide
are the ones the program runs with when it is launched as written. A flag whose value cannot be
known without the command line (a required option, a positional argument, a sub-command) stays
unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RANK_DESTS = frozenset({"rank", "local_rank", "global_rank", "node_rank"})


@dataclass
class ArgParser:
    """An `argparse.ArgumentParser` (or one of its groups, which share its options)."""

    defaults: dict[str, object] = field(default_factory=dict)
    unknowable: bool = False  # sub-commands: which options exist depends on the command line


@dataclass
class ParserMethod:
    parser: ArgParser
    attr: str


def _dest(flags: list, kwargs: dict) -> str | None:
    dest = kwargs.get("dest")
    if isinstance(dest, str):
        return dest
    names = [f for f in flags if isinstance(f, str)]
    if not names:
        return None
    longs = [f for f in names if f.startswith("--")]
    name = (longs or names)[0].lstrip("-")
    return name.replace("-", "_")


def _default(ev, flags: list, kwargs: dict) -> object:
    from commlint.lint.perrank import UNK, Builtin

    positional = bool(flags) and isinstance(flags[0], str) and not flags[0].startswith("-")
    if kwargs.get("required") is True or (positional and kwargs.get("nargs") not in ("?", "*")):
        return UNK  # given on the command line: its value is not in the source
    action = kwargs.get("action")
    if action == "store_true":
        return kwargs.get("default", False)
    if action == "store_false":
        return kwargs.get("default", True)
    if "default" not in kwargs:
        return None
    value = kwargs["default"]
    kind = kwargs.get("type")
    if isinstance(value, str) and isinstance(kind, Builtin):
        # argparse converts a string default with the option's type
        try:
            return kind.fn(ev, [value], {}, None)
        except Exception:
            return UNK
    return value


def call_parser(ev, m: ParserMethod, args: list, kwargs: dict) -> object:
    """`parser.add_argument(...)`, `parser.parse_args()`, …, on rank `ev`."""
    from commlint.lint.perrank import UNK, Cls, Obj

    p = m.parser
    if m.attr == "add_argument":
        dest = _dest(args, kwargs)
        if dest is not None:
            p.defaults[dest] = ev.rank if dest in RANK_DESTS else _default(ev, args, kwargs)
        return None
    if m.attr in ("add_argument_group", "add_mutually_exclusive_group"):
        return p
    if m.attr == "set_defaults":
        p.defaults.update(kwargs)
        return None
    if m.attr == "add_subparsers":
        p.unknowable = True
        return UNK
    if m.attr in ("parse_args", "parse_known_args", "parse_intermixed_args"):
        if p.unknowable or (args and args[0] not in (None, [])):
            return UNK  # sub-commands, or arguments the program builds itself
        ns = Obj(Cls("Namespace", {}, []), dict(p.defaults))
        return (ns, []) if m.attr == "parse_known_args" else ns
    return UNK
