"""torchrun's command line for `commlint run`, read by torchrun's own parser.

The launcher options are those of `torch.distributed.run.get_args_parser()` of the installed
torch, added to `commlint run`'s parser the first time it parses or prints its help — so only
the run command imports torch, and a pasted `torchrun ...` line works with every flag and
spelling that torch version knows.

Where both define an option, commlint's own wins (said in `commlint run --help` and
docs/dryrun.md): `--nproc-per-node`, `--nnodes` and `--node-rank` (same meaning; `--node-rank`
without a value records every node), and `--tee`/`-t` (commlint's takes the ranks whose output is
shown; torchrun's `LOCAL_RANK:STREAM` form is read as those local ranks). torchrun has no
`--timeout`; were a future torch to add an option string commlint already has, commlint's
meaning stays and torchrun's is left out.

A single-machine simulation has no rendezvous, restarts, log files or process placement: those
options are accepted and ignored, and one stderr line says so and what was assumed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from typing import Any, NoReturn

# A node of the job being gated has this many GPUs when this machine has none to count
# (`--nproc-per-node auto|gpu|xpu`): the usual 8-GPU node.
ASSUMED_GPUS_PER_NODE = 8

# torchrun options that become the variables torchrun gives its workers.
_WORKER_VARIABLES = {
    "master_addr": "MASTER_ADDR",
    "master_port": "MASTER_PORT",
    "role": "ROLE_NAME",
    "max_restarts": "TORCHELASTIC_MAX_RESTARTS",
    "rdzv_id": "TORCHELASTIC_RUN_ID",
}
# torchrun options with a meaning here beyond "ignored"
_MEANINGFUL = {"module", "no_python", "run_path", *_WORKER_VARIABLES}
_HELP = {
    "module": "run the program as a module, as `python -m` (torchrun's -m)",
    "no_python": "refused: only a Python program can be dry-run",
    "run_path": "accepted: every rank runs the script in its own interpreter anyway",
    "master_addr": "MASTER_ADDR the ranks see",
    "master_port": "MASTER_PORT the ranks see",
    "role": "ROLE_NAME the ranks see",
    "max_restarts": "TORCHELASTIC_MAX_RESTARTS the ranks see (nothing is restarted)",
    "rdzv_id": "TORCHELASTIC_RUN_ID the ranks see",
}
_PREFIX = "torchrun_"  # copied options' dests: never one of commlint's own


def nproc_spec(text: str) -> str:
    """torchrun's `--nproc-per-node`: a count, `auto`, `cpu`, `gpu` or `xpu`."""
    if text in ("auto", "cpu", "gpu", "xpu"):
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of ranks, auto, cpu, gpu or xpu"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return str(value)


def nnodes_spec(text: str) -> tuple[int, int]:
    """torchrun's `--nnodes`: `N` or `MIN:MAX`."""
    parts = text.split(":")
    try:
        low, high = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (0, -1)
    except ValueError:
        low, high = 0, -1
    if len(parts) > 2 or low < 1 or high < low:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of nodes or a range MIN:MAX")
    return low, high


class RunParser(argparse.ArgumentParser):
    """`commlint run`'s parser: torchrun's options join it when it is first used, so that
    building the whole command line (`commlint check ...`) never imports torch."""

    _launcher_added = False
    _without_torch: str | None = None  # why torchrun's options could not be added

    def _add_launcher(self) -> None:
        if not self._launcher_added:
            self._launcher_added = True
            try:
                if not add_torchrun_options(self):
                    self._without_torch = NEEDS_TORCH
            except ImportError as exc:  # a torch built without torch.distributed
                self._without_torch = f"`commlint run` needs torch.distributed: {exc}"

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._add_launcher()
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:  # said here in one line, not by the top parser with its usage
            self.error(
                f"unrecognized arguments: {' '.join(extras)} (neither commlint's nor the "
                "installed torchrun's; see commlint run --help)"
            )
        return parsed, extras

    def format_help(self) -> str:
        self._add_launcher()
        return super().format_help()

    def format_usage(self) -> str:
        self._add_launcher()
        return super().format_usage()

    def error(self, message: str) -> NoReturn:
        if self._without_torch:  # a torchrun flag is unknown only because torch is missing
            self.exit(2, f"commlint: error: {self._without_torch}\n")
        self.exit(2, f"commlint run: error: {message}\n")  # one line: the usage is pages long


NEEDS_TORCH = "`commlint run` needs torch: pip install 'commlint[torch]'"


def add_torchrun_options(parser: argparse.ArgumentParser) -> bool:
    """Add the installed torchrun's options that commlint does not define itself; False when
    torch is not installed."""
    if importlib.util.find_spec("torch") is None:
        return False
    from torch.distributed.run import get_args_parser

    own_dests = {a.dest for a in parser._actions}
    own_strings = set(parser._option_string_actions)
    group = parser.add_argument_group(
        "torchrun's options (the installed torch's own parser)",
        "A torchrun command line works as it is. --nproc-per-node, --nnodes, --node-rank and "
        "--tee/-t are above (commlint's own; --nnodes MIN:MAX simulates MAX nodes; "
        f"--nproc-per-node auto|gpu on a machine without GPUs assumes {ASSUMED_GPUS_PER_NODE}). "
        "Rendezvous, restarts, logging and placement options configure a real launch: a "
        "single-machine simulation ignores them and says so on stderr.",
    )
    for action in get_args_parser()._actions:
        if not action.option_strings or action.dest in own_dests or action.dest == "help":
            continue
        strings = [s for s in action.option_strings if s not in own_strings]
        if not strings:
            continue
        kwargs: dict[str, Any] = {
            "dest": _PREFIX + action.dest,
            "default": argparse.SUPPRESS,  # present in the namespace only when given
            "help": _HELP.get(action.dest, "ignored"),
        }
        if action.nargs == 0:
            kwargs["action"] = "store_true"
        else:
            kwargs.update(type=action.type, choices=action.choices, metavar=_metavar(action))
        group.add_argument(*strings, **kwargs)
    return True


def _metavar(action: argparse.Action) -> str:
    if action.choices:
        return "{" + ",".join(map(str, action.choices)) + "}"
    return "V"


@dataclass
class Launch:
    """What a torchrun command line asks of the simulation."""

    nproc_per_node: int
    nnodes: int
    program: str  # the file that runs (a module's, for -m)
    module: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # set in every rank, over torchrun's
    assumed: list[str] = field(default_factory=list)  # one clause per assumption
    ignored: list[str] = field(default_factory=list)  # torchrun options given and ignored

    def note(self) -> str | None:
        """The one stderr line saying what was assumed (None: nothing was)."""
        if not self.assumed and not self.ignored:
            return None
        nodes = f"{self.nnodes} node{'s' if self.nnodes != 1 else ''}"
        ranks = f"{self.nproc_per_node} rank{'s' if self.nproc_per_node != 1 else ''}"
        parts = [f"simulating {nodes} × {ranks} on this machine", *self.assumed]
        if self.ignored:
            parts.append(
                "ignored (a real launch's rendezvous, restarts, logging or placement): "
                + ", ".join(self.ignored)
            )
        return "; ".join(parts)


class LaunchError(ValueError):
    """A command line that cannot be dry-run; its message is one line."""


def resolve_launch(args: argparse.Namespace) -> Launch:
    """The simulation a parsed `commlint run` command line asks for; LaunchError if none."""
    given = {k[len(_PREFIX) :]: v for k, v in vars(args).items() if k.startswith(_PREFIX)}
    if given.get("no_python"):
        raise LaunchError(
            f"--no-python: {args.program} would run as an executable, not a Python program, "
            "and only a Python program can be dry-run; give its script (or -m module) instead"
        )
    low, high = args.nnodes if isinstance(args.nnodes, tuple) else (args.nnodes, args.nnodes)
    assumed = []
    if low != high:
        assumed.append(
            f"--nnodes {low}:{high}: the most nodes the job can have (--nnodes N checks another)"
        )
    nproc = _ranks_per_node(str(args.nproc_per_node), assumed)
    module = args.program if given.get("module") else None
    program = _module_file(module) if module else args.program
    env = {var: str(given[dest]) for dest, var in _WORKER_VARIABLES.items() if dest in given}
    ignored = [_spelling(dest) for dest in given if dest not in _MEANINGFUL]
    return Launch(nproc, high, program, module, env, assumed, ignored)


def _ranks_per_node(spec: str, assumed: list[str]) -> int:
    if spec.isdigit():
        return int(spec)
    if spec == "cpu":
        count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        count = count or os.cpu_count() or 1
        assumed.append(f"--nproc-per-node cpu: {count}, this machine's CPUs (as torchrun)")
        return count
    count = _accelerators(spec)
    if count:
        assumed.append(f"--nproc-per-node {spec}: {count}, this machine's {spec.upper()}s")
        return count
    assumed.append(
        f"--nproc-per-node {spec}: no GPU here, {ASSUMED_GPUS_PER_NODE} per node assumed "
        "(--nproc-per-node N for another count)"
    )
    return ASSUMED_GPUS_PER_NODE


def _accelerators(spec: str) -> int:
    import torch

    device = torch.xpu if spec == "xpu" else torch.cuda
    return device.device_count() if device.is_available() else 0


def _spelling(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _module_file(name: str) -> str:
    """The file `python -m NAME` runs from this folder, found without running any of the
    module's packages (their `__init__` runs in each rank, as in a real launch). Relative to
    the working folder when under it, as a script path would be given."""
    missing = LaunchError(f"-m {name}: no module named {name!r} (as `python -m` looks)")
    spec = None
    path: list[str] | None = [os.getcwd(), *sys.path]  # `python -m` looks here first
    parts = name.split(".")
    for i in range(len(parts)):
        if path is None:
            raise missing  # what came before is a module, not a package
        spec = _find_spec(".".join(parts[: i + 1]), path)
        if spec is None:
            raise missing
        path = spec.submodule_search_locations
        path = list(path) if path is not None else None
    if path is not None:  # a package runs its __main__
        spec = _find_spec(f"{name}.__main__", path)
        if spec is None:
            raise LaunchError(f"-m {name}: {name!r} is a package with no __main__ to run")
    origin = spec.origin if spec else None
    if not origin or not origin.endswith(".py") or not os.path.isfile(origin):
        raise LaunchError(f"-m {name}: {origin or name!r} is not Python source to dry-run")
    rel = os.path.relpath(origin)
    return origin if rel.startswith("..") else rel


def _find_spec(fullname: str, path: list[str]) -> Any:
    """The import system's finders asked for one name (nothing is imported or run)."""
    if "." not in fullname:
        # top level: the finders look along sys.path; the working folder first, as `python -m`
        saved = sys.path[:]
        sys.path[:] = path
        try:
            return _ask_finders(fullname, None)
        finally:
            sys.path[:] = saved
    return _ask_finders(fullname, path)


def _ask_finders(fullname: str, path: list[str] | None) -> Any:
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(fullname, path)
        except (ImportError, ValueError):
            continue
        if spec is not None:
            return spec
    return None
