"""Where a dry-run's ranks run: the launcher, one small interface behind `driver._pass`.

A launcher starts rank processes (a `RankSpec` each), gives every rank a channel to the
driver — the messages it streams (actions, values it sent, its end), the questions it asks
for values its peers send now (`channel.Live`), the answers — and stops, kills and collects
them. The driver keeps everything else: which ranks run in a pass, live delivery, progress
and time limits, the passes themselves.

- `local` (`local_launcher.py`): processes forked from this warm process, pipes as channels;
- `ray` (`ray_launcher.py`): one agent per Ray node forks the ranks placed there; every
  message, value and answer travels through Ray (no filesystem shared between nodes);
- `slurm` (`slurm_launcher.py`) is a level above: each Slurm task records a share of the ranks
  with the local launcher, and the shares are merged into one verdict.

Ranks are named by their rank number: a pass runs each rank at most once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from commlint.plans.dryrun.child import RankSpec
    from commlint.plans.dryrun.procs import Sample
    from commlint.plans.dryrun.values import ValueTable

LAUNCHERS = ("local", "ray", "slurm")


class LauncherError(Exception):
    """The launcher cannot run ranks (not installed, cluster unreachable): one line, exit 2."""


@dataclass
class Ended:
    """A rank process that is over, and what it left: its exit code (negative: the signal),
    the processes it started that were still running (killed with it), its output, what
    faulthandler wrote when it crashed, and `COMMLINT_DEBUG` notes (file name -> bytes)."""

    exitcode: int | None
    leftover: int = 0
    output: str = ""
    fault: str = ""
    debug: dict[str, bytes] = field(default_factory=dict)


@dataclass
class Event:
    """What one rank did since the last `Launcher.wait`: its messages, in order, and its end
    (None while it runs)."""

    rank: int
    messages: list[Any]
    ended: Ended | None = None


@dataclass
class NodeUsage:
    """One node's share of a run: rank processes started there, their CPU seconds (with what
    they started), and the largest peak resident size of one of them."""

    node: str
    ranks: int = 0
    cpu_seconds: float = 0.0
    peak_rank_bytes: int = 0


class Launcher(ABC):
    """Starts, talks to, stops and collects rank processes for the driver."""

    name = "?"

    def open(self, mode: str) -> None:  # noqa: B027 (optional)
        """Before the first pass: the run's tensor mode (a launcher warms its forkers)."""

    @abstractmethod
    def begin(self, table: ValueTable, mode: str) -> None:
        """A pass starts: the values it delivers, and its tensor mode."""

    @abstractmethod
    def start(self, spec: RankSpec) -> None:
        """Start one rank (its output and fault files are the launcher's to place)."""

    @abstractmethod
    def can_start(self, live: int) -> bool:
        """Whether one more rank may be started, `live` ranks being alive (memory)."""

    @abstractmethod
    def wait(self, timeout: float) -> list[Event]:
        """Messages and ends of the ranks, waiting at most `timeout` seconds for the first."""

    @abstractmethod
    def reply(self, rank: int, value: Any) -> None:
        """Answer the rank's question for values (`channel.Live`)."""

    @abstractmethod
    def sample(self, rank: int) -> Sample | None:
        """The rank's CPU time and CPU wait so far (None: unknown)."""

    @abstractmethod
    def stop(self, rank: int, signum: int) -> None:
        """Send the rank the signal it raises at its line (`procs.STOP_SIGNALS`)."""

    @abstractmethod
    def kill(self, rank: int) -> Ended:
        """Kill the rank and everything it started; what it left."""

    @abstractmethod
    def abandon(self) -> None:
        """Interrupted: stop every running rank at once."""

    @abstractmethod
    def end_pass(self, clean: bool) -> None:
        """The pass is over (`clean`: every rank was collected): sweep what is left."""

    def default_jobs(self) -> int | None:
        """Ranks that compute at once when -j is not given (None: the driver's default)."""
        return None

    def usage(self) -> list[NodeUsage]:
        """Per node: ranks, CPU seconds, peak memory (empty: not measured)."""
        return []

    def close(self) -> None:  # noqa: B027 (optional)
        """After the run: nothing of it is left running."""
