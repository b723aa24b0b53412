"""argparse, as the per-rank evaluator sees it: every rank parses the same command line.

A training script reads its sizes from the command line (`--num-tasks 5`, `--epochs 3`), and
those sizes decide how often its ranks communicate (one all-reduce per locally owned head).
The values are the same on every rank, so they are never a reason for ranks to differ; but the
evaluator needs them to count. The program as written runs with its defaults, so each option
holds its default (converted by its `type`, as argparse does for string defaults); an option
with no default a run can know (required, positional) stays unknown. The rank's own options
(`--local_rank`) are not given a value here: the evaluator gives them the rank.
"""

from __future__ import annotations

RANK_DESTS = frozenset(
    {"rank", "global_rank", "local_rank", "process_index", "local_process_index", "node_rank"}
)
WORLD_DESTS = frozenset({"world_size", "num_processes", "nproc_per_node", "nprocs"})
CONVERT = {"int": int, "float": float, "str": str}


class ArgParser:
    """One `argparse.ArgumentParser` (its groups write into it)."""

    def __init__(self, unknown: object) -> None:
        self.unknown = unknown
        self.values: dict[str, object] = {}
        self.subcommands = False

    def call(self, method: str, args: list, kwargs: dict) -> object:
        """The result of `parser.<method>(*args, **kwargs)`, or `self.unknown`."""
        if method in ("add_argument_group", "add_mutually_exclusive_group"):
            return self
        if method == "add_argument":
            self._add(args, kwargs)
            return None
        if method == "set_defaults":
            self.values.update({k: v for k, v in kwargs.items() if k not in RANK_DESTS})
            return None
        if method == "add_subparsers":
            self.subcommands = True  # which one runs is on the command line
            return self.unknown
        if method in ("parse_args", "parse_known_args", "parse_intermixed_args"):
            if args or kwargs.get("args") is not None or self.subcommands:
                return self.unknown  # an explicit argument list, or a subcommand's options
            ns = dict(self.values)
            return (ns, []) if method == "parse_known_args" else ns
        return self.unknown

    def _add(self, args: list, kwargs: dict) -> None:
        flags = [a for a in args if isinstance(a, str)]
        if len(flags) != len(args) or not flags:
            return
        dest = kwargs.get("dest")
        if not isinstance(dest, str):
            longs = [f for f in flags if f.startswith("--")]
            shorts = [f for f in flags if f.startswith("-") and not f.startswith("--")]
            if longs:
                dest = longs[0][2:]
            elif shorts:
                dest = shorts[0][1:]
            else:
                dest = flags[0]  # a positional: given on the command line
                self.values[dest.replace("-", "_")] = self.unknown
                return
            dest = dest.replace("-", "_")
        if dest in RANK_DESTS or dest in WORLD_DESTS:
            return  # the launcher's value: the evaluator gives the rank / world size
        action = kwargs.get("action")
        if kwargs.get("required") is True:
            value: object = self.unknown
        elif "default" in kwargs:
            value = kwargs["default"]
        elif action == "store_true":
            value = False
        elif action == "store_false":
            value = True
        else:
            value = None
        kind = kwargs.get("type")
        conv = CONVERT.get(getattr(kind, "__name__", "")) if kind is not None else None
        if isinstance(value, str) and conv is not None:
            try:
                value = conv(value)
            except ValueError:
                value = self.unknown
        self.values[dest] = value
