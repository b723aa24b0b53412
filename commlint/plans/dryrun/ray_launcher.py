"""The Ray launcher (`commlint run --launcher ray`): ranks spread over the nodes of a Ray
cluster — the one `RAY_ADDRESS` names, the one this process is already connected to, or a
local one started for the run.

One agent actor per node (pinned there: `NodeAffinitySchedulingStrategy`) imports torch,
warms up once, and forks the ranks placed on its node with the local launcher, as
`commlint run` does on one machine (a fork from a warm process costs a rank nothing; a fresh
interpreter per rank would cost ~3 s of CPU). Everything the ranks exchange with the driver
travels through Ray, never through a shared filesystem: their messages (actions, the values
they deliver — barrier hand-overs of files included — and their ends) come back as the
results of the agents' `poll`; the answers to their questions for values (`channel.Live`),
each pass's value table, stop signals and kills go to the agents as actor calls; a rank's
output comes back with its end. Each node has its own scratch folder.

The program and its files must be on every node at the same path, as under torchrun; so
must commlint and torch.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from typing import Any

from commlint.plans.dryrun.child import RankSpec
from commlint.plans.dryrun.launch import Ended, Event, Launcher, LauncherError, NodeUsage
from commlint.plans.dryrun.procs import Sample, live_limit
from commlint.plans.dryrun.values import ValueTable

_POLL_SECONDS = 0.2  # longest a poll waits at an agent for its ranks' first message
_SAMPLE_SECONDS = 0.5  # how often an agent measures its ranks' CPU time


class NodeAgent:
    """Runs on one node: forks the ranks the driver places here (a `LocalLauncher`), and
    relays their messages. Ray runs its methods in a few threads (`max_concurrency`): a
    `poll` waiting for messages must not hold up a `start` or a `reply`; one lock keeps the
    launcher's state whole."""

    def __init__(self) -> None:
        from commlint.plans.dryrun.warm import warm_up

        warm_up("fake")  # once per node and session, reused by every run
        self._lock = threading.Lock()
        self._launcher: Any = None
        self._serial: dict[int, int] = {}  # rank -> which start of it the driver knows
        self._ended: dict[int, tuple[int, Ended]] = {}
        self._sampled = 0.0

    def info(self) -> dict[str, Any]:
        import socket

        import ray

        return {
            "node": ray.get_runtime_context().get_node_id(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }

    def open_run(self, cwd: str, programs: list[str], module: str | None, mode: str) -> None:
        """A run starts: its working folder, its program (the user's frames), its mode."""
        from commlint import callsites
        from commlint.plans.dryrun.local_launcher import LocalLauncher
        from commlint.plans.dryrun.recorder import USER_PROGRAMS

        try:
            os.chdir(cwd)
        except OSError as exc:
            raise LauncherError(f"the working folder {cwd} is not on this node: {exc}") from None
        USER_PROGRAMS.update(programs)
        if module:
            callsites.claim_program_package(module)
        with self._lock:
            self._launcher = LocalLauncher()
            self._launcher.open(mode)
            self._serial.clear()
            self._ended.clear()

    def close_run(self) -> NodeUsage | None:
        with self._lock:
            launcher, self._launcher = self._launcher, None
            if launcher is None:
                return None
            usage = launcher.usage()[0]
            launcher.close()
            return usage

    def usage(self) -> NodeUsage:
        with self._lock:
            return self._launcher.usage()[0]

    def begin(self, table: ValueTable, mode: str) -> None:
        with self._lock:
            self._launcher.begin(table, mode)
            self._ended.clear()

    def start(self, spec: RankSpec, serial: int) -> None:
        with self._lock:
            self._serial[spec.rank] = serial
            self._launcher.start(spec)

    def poll(self, timeout: float) -> tuple[list[tuple[int, Event]], dict[int, Sample], bool]:
        """The ranks' messages and ends (each tagged with its start's serial), waiting at most
        `timeout` for the first; their CPU samples when due; whether the node's memory allows
        one more rank."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                launcher = self._launcher
                if launcher is None:
                    return [], {}, True
                events = launcher.wait(0.02)
                for e in events:
                    if e.ended is not None:
                        self._ended[e.rank] = (self._serial.get(e.rank, 0), e.ended)
                samples = {}
                now = time.monotonic()
                if now - self._sampled >= _SAMPLE_SECONDS:
                    self._sampled = now
                    for rank in launcher.live():
                        sample = launcher.sample(rank)
                        if sample is not None:
                            samples[rank] = sample
                live = len(launcher.live())
            if events or samples or time.monotonic() >= deadline:
                tagged = [(self._serial.get(e.rank, 0), e) for e in events]
                return tagged, samples, live < live_limit(live)
            time.sleep(0.002)  # let a start or a reply take the lock

    def reply(self, rank: int, value: Any) -> None:
        with self._lock:
            self._launcher.reply(rank, value)

    def stop(self, rank: int, signum: int) -> None:
        with self._lock:
            self._launcher.stop(rank, signum)

    def kill(self, rank: int) -> Ended:
        with self._lock:
            if rank in self._launcher.live():
                return self._launcher.kill(rank)
            # it ended on its own; the poll that says so is on its way to the driver
            return self._ended[rank][1]

    def abandon(self) -> None:
        with self._lock:
            if self._launcher is not None:
                self._launcher.abandon()

    def end_pass(self, clean: bool) -> None:
        with self._lock:
            self._launcher.end_pass(clean)


class _Node:
    """The driver's view of one agent."""

    def __init__(self, actor: Any, info: dict[str, Any]) -> None:
        self.actor, self.info = actor, info
        self.live = 0  # ranks started here and not yet ended
        self.room = True  # the node's memory allows one more (its last poll said)
        self.started = 0


class RayLauncher(Launcher):
    """Ranks on the nodes of a Ray cluster."""

    name = "ray"

    def __init__(self, program: str, module: str | None) -> None:
        self._program, self._module = program, module
        self._nodes: list[_Node] = []
        self._where: dict[int, _Node] = {}  # running rank -> its node
        self._serial: dict[int, int] = {}  # rank -> the serial of its current start
        self._count = 0
        self._polls: dict[Any, _Node] = {}  # outstanding poll -> its node
        self._starts: dict[Any, tuple[int, int]] = {}  # outstanding start -> (rank, serial)
        self._samples: dict[int, Sample] = {}
        self._lost: list[Event] = []
        self._owns_ray = False

    # --- the run --------------------------------------------------------------------------

    def open(self, mode: str) -> None:
        try:
            import ray
        except ImportError:
            raise LauncherError(
                "--launcher ray needs Ray: pip install 'commlint[ray]' (or pip install ray)"
            ) from None
        if not ray.is_initialized():
            # RAY_ADDRESS, or a fresh local instance (never a stale one Ray would look up
            # in its temp folder)
            address = os.environ.get("RAY_ADDRESS") or None
            if address:
                _reachable(address)
            try:
                ray.init(
                    address=address or "local",
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level="error",
                    configure_logging=False,
                )
            except Exception as exc:  # ConnectionError, a timeout, a bad address
                where = f"RAY_ADDRESS={address}" if address else "a local Ray cluster"
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise LauncherError(f"--launcher ray: cannot connect to {where}: {first}") from None
            self._owns_ray = True
        self._nodes = [_Node(actor, info) for actor, info in _agents(ray)]
        if not self._nodes:
            raise LauncherError("--launcher ray: the Ray cluster has no live node")
        programs = [self._program, os.path.abspath(self._program)]
        cwd = os.getcwd()
        try:
            ray.get(
                [n.actor.open_run.remote(cwd, programs, self._module, mode) for n in self._nodes]
            )
        except Exception as exc:  # a node without the working folder, an agent that died
            cause = getattr(exc, "cause", None) or exc
            why = str(cause) if isinstance(cause, LauncherError) else _fault(cause)
            raise LauncherError(f"--launcher ray: a node cannot run the ranks: {why}") from None
        for n in self._nodes:
            self._polls[n.actor.poll.remote(_POLL_SECONDS)] = n

    def close(self) -> None:
        import ray

        if not ray.is_initialized():
            return
        try:
            ray.get([n.actor.abandon.remote() for n in self._nodes], timeout=30)
            ray.get([n.actor.close_run.remote() for n in self._nodes], timeout=60)
        except Exception:  # a node lost: its agent's ranks died with it
            pass
        self._polls.clear()
        if self._owns_ray:
            ray.shutdown()
            _AGENTS.clear()

    def default_jobs(self) -> int:
        return sum(n.info["cpus"] for n in self._nodes)

    def usage(self) -> list[NodeUsage]:
        import ray

        out = []
        for n, u in zip(
            self._nodes, ray.get([n.actor.usage.remote() for n in self._nodes]), strict=True
        ):
            name = f"{u.node} ({n.info['node'][:8]})"
            out.append(NodeUsage(name, u.ranks, u.cpu_seconds, u.peak_rank_bytes))
        return out

    def nodes(self) -> list[dict[str, Any]]:
        """Each node's agent: node id, host, pid, CPUs (the bench measures them)."""
        return [n.info for n in self._nodes]

    # --- a pass ---------------------------------------------------------------------------

    def begin(self, table: ValueTable, mode: str) -> None:
        import ray

        ref = ray.put(table)  # once for every node
        ray.get([n.actor.begin.remote(ref, mode) for n in self._nodes])

    def can_start(self, live: int) -> bool:
        return any(n.room for n in self._nodes)

    def start(self, spec: RankSpec) -> None:
        # the node with room that runs the fewest ranks for its CPUs
        node = min(
            [n for n in self._nodes if n.room] or self._nodes,
            key=lambda n: (n.live / max(1, n.info["cpus"]), n.started),
        )
        self._count += 1
        serial = self._serial[spec.rank] = self._count
        self._where[spec.rank] = node
        node.live += 1
        node.started += 1
        self._starts[node.actor.start.remote(spec, serial)] = (spec.rank, serial)

    def wait(self, timeout: float) -> list[Event]:
        import ray

        events, self._lost = self._lost, []
        self._check_starts()
        refs = list(self._polls)
        if not refs or events:
            return events
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            node = self._polls.pop(ref)
            try:
                tagged, samples, node.room = ray.get(ref)
            except Exception as exc:  # the agent (its node) is gone: so are its ranks
                events.extend(self._node_lost(node, exc))
                continue
            self._samples.update(samples)
            for serial, event in tagged:
                if self._serial.get(event.rank) != serial or event.rank not in self._where:
                    continue  # a run of the rank the driver already killed
                if event.ended is not None:
                    self._gone(event.rank)
                events.append(event)
            self._polls[node.actor.poll.remote(_POLL_SECONDS)] = node
        return events

    def _check_starts(self) -> None:
        import ray

        if not self._starts:
            return
        done, _ = ray.wait(list(self._starts), num_returns=len(self._starts), timeout=0)
        for ref in done:
            rank, serial = self._starts.pop(ref)
            try:
                ray.get(ref)
            except Exception as exc:
                if self._serial.get(rank) == serial and rank in self._where:
                    self._gone(rank)
                    self._lost.append(Event(rank, [], Ended(None, fault=_fault(exc))))

    def _node_lost(self, node: _Node, exc: BaseException) -> list[Event]:
        self._nodes.remove(node)
        lost = [r for r, n in self._where.items() if n is node]
        for r in lost:
            self._gone(r)
        if not self._nodes:
            raise LauncherError(f"--launcher ray: every node's agent was lost: {_fault(exc)}")
        return [Event(r, [], Ended(None, fault=_fault(exc))) for r in lost]

    def _gone(self, rank: int) -> None:
        node = self._where.pop(rank, None)
        if node is not None:
            node.live -= 1
        self._samples.pop(rank, None)

    def reply(self, rank: int, value: Any) -> None:
        node = self._where.get(rank)
        if node is not None:
            node.actor.reply.remote(rank, value)

    def sample(self, rank: int) -> Sample | None:
        return self._samples.get(rank)

    def stop(self, rank: int, signum: int) -> None:
        node = self._where.get(rank)
        if node is not None:
            node.actor.stop.remote(rank, signum)

    def kill(self, rank: int) -> Ended:
        import ray

        node = self._where[rank]
        for ref, (r, _) in list(self._starts.items()):
            if r == rank:  # the start first: a kill must find the rank
                ray.wait([ref], timeout=60)
        ended = ray.get(node.actor.kill.remote(rank))
        self._gone(rank)
        return ended

    def abandon(self) -> None:
        import ray

        ray.get([n.actor.abandon.remote() for n in self._nodes], timeout=30)

    def end_pass(self, clean: bool) -> None:
        import ray

        ray.get([n.actor.end_pass.remote(clean) for n in self._nodes])


# one agent per node and Ray session, reused by every run of this process
_AGENTS: dict[str, tuple[Any, dict[str, Any]]] = {}


def _agents(ray: Any) -> list[tuple[Any, dict[str, Any]]]:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    alive = [n["NodeID"] for n in nodes]
    cpus = {n["NodeID"]: int(n.get("Resources", {}).get("CPU", 1)) for n in nodes}
    for gone in set(_AGENTS) - set(alive):
        _AGENTS.pop(gone)
    actor_class = ray.remote(num_cpus=0, max_concurrency=8)(NodeAgent)
    fresh = {}
    for node_id in alive:
        if node_id not in _AGENTS:
            fresh[node_id] = actor_class.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
            ).remote()
    if fresh:
        infos = ray.get([a.info.remote() for a in fresh.values()])
        for (node_id, actor), info in zip(fresh.items(), infos, strict=True):
            _AGENTS[node_id] = (actor, info)
    for node_id in alive:  # the CPUs Ray gives the node (`ray start --num-cpus`), not the host's
        _AGENTS[node_id][1]["cpus"] = max(1, cpus[node_id])
    return [_AGENTS[n] for n in alive]


def _reachable(address: str, seconds: float = 10.0) -> None:
    """Fail at once, in one line, when the cluster's address does not answer: Ray itself
    retries an unreachable GCS for minutes, logging to stderr."""
    import socket

    where = address.removeprefix("ray://")
    if where == "auto" or where.startswith("local"):
        return  # Ray looks for a cluster on this machine, and says at once when none runs
    host, sep, port = where.rpartition(":")
    if not sep or not port.isdigit():
        raise LauncherError(f"--launcher ray: RAY_ADDRESS={address} is not HOST:PORT")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=seconds).close()
    except OSError as exc:
        raise LauncherError(
            f"--launcher ray: cannot connect to RAY_ADDRESS={address}: "
            f"{exc.strerror or exc} (is the cluster's head node up?)"
        ) from None


def _fault(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
