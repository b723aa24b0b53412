"""Runtime of a replay script: perform a trace's communication, rank by rank, with gloo on CPU.

`commlint replay` copies this file verbatim into the script it writes, followed by the cases
to run, so the script is standalone (torch only, never commlint). Run it with
`torchrun --nproc-per-node N repro.py`, or `python repro.py` to spawn the ranks itself.

Every rank reports, per case, what it did: `finished`, `timeout` at an action (the hang),
`closed` at an action (a peer gave up on the connection while this rank waited), `error` at an
action (an exception), or `crashed` (the process died, e.g. gloo aborting on a size
mismatch) — the ground truth the checker's verdict is compared with. A rank that is done
waits (on the store) until every rank is done, so a peer that is still blocked hangs until its
timeout instead of failing on a closed connection: that is what a long-running job does.

`closed` is the other half of a hang or a crash: gloo tells a rank "Connection closed by
peer" when the rank it waits on gives up first (timed out, or died). In a deadlock of two
ranks one of them reports `timeout` and the other, usually, `closed`.

Exit codes (of `python repro.py`, and of each rank under torchrun, whose own exit code is
then non-zero too):
  0  every rank finished every case: the communication completes;
  1  a hang: some rank timed out, saw its connection closed, or never reported (killed);
  2  usage error (bad command-line arguments);
  3  a failure: some rank raised an error or its process died (and none hung).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import sys
import time

import torch
import torch.distributed as dist

DEFAULT_NUMEL = 1 << 16  # 256 KiB of float32: gloo cannot buffer a send this large
DTYPES = {
    "float32": torch.float32,
    "float": torch.float32,
    "float64": torch.float64,
    "double": torch.float64,
    "float16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "long": torch.int64,
    "int32": torch.int32,
    "int": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.uint8,
}
REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "product": dist.ReduceOp.PRODUCT,
    "prod": dist.ReduceOp.PRODUCT,
}


def _tensor(a: dict) -> torch.Tensor:
    dtype = DTYPES.get(str(a.get("dtype") or "float32").removeprefix("torch."), torch.float32)
    if a.get("shape") is not None:
        numel = 1
        for d in a["shape"]:
            numel *= d
    elif a.get("bytes") is not None:
        numel = max(1, a["bytes"] // torch.tensor([], dtype=dtype).element_size())
    else:
        numel = DEFAULT_NUMEL
    return torch.ones(numel, dtype=dtype)


def _issue(a: dict, rank: int, groups: dict, members: dict):
    """Perform one communication action; returns the work handle of async ops."""
    op = a["op"]
    name = a.get("group", "WORLD")
    group = groups[name]
    is_async = bool(a.get("async")) or (a.get("handle") is not None and a.get("async") is None)
    t = _tensor(a)
    if op == "send":
        return dist.send(t, a["peer"], group=group, tag=a.get("tag", 0))
    if op == "recv":
        return dist.recv(t, a["peer"], group=group, tag=a.get("tag", 0))
    if op == "isend":
        return dist.isend(t, a["peer"], group=group, tag=a.get("tag", 0))
    if op == "irecv":
        return dist.irecv(t, a["peer"], group=group, tag=a.get("tag", 0))
    size = len(members[name])
    red = REDUCE_OPS.get(str(a.get("reduce_op") or "sum").lower(), dist.ReduceOp.SUM)
    root = a.get("root")
    if op == "all_reduce":
        return dist.all_reduce(t, op=red, group=group, async_op=is_async)
    if op == "all_gather":
        return dist.all_gather([torch.empty_like(t) for _ in range(size)], t, group, is_async)
    if op == "reduce_scatter":
        out = torch.empty_like(t)
        return dist.reduce_scatter(out, [t.clone() for _ in range(size)], red, group, is_async)
    if op == "broadcast":
        return dist.broadcast(t, root, group=group, async_op=is_async)
    if op == "reduce":
        return dist.reduce(t, root, op=red, group=group, async_op=is_async)
    if op == "gather":
        chunks = [torch.empty_like(t) for _ in range(size)] if rank == root else None
        return dist.gather(t, chunks, dst=root, group=group, async_op=is_async)
    if op == "scatter":
        chunks = [t.clone() for _ in range(size)] if rank == root else None
        return dist.scatter(t, chunks, src=root, group=group, async_op=is_async)
    if op == "all_to_all":
        ins, outs = a.get("in_splits"), a.get("out_splits")
        if ins is None or outs is None:
            ins = outs = [max(1, t.numel() // size)] * size
        dtype = t.dtype
        return dist.all_to_all_single(
            torch.empty(sum(outs), dtype=dtype),
            torch.ones(sum(ins), dtype=dtype),
            outs,
            ins,
            group=group,
            async_op=is_async,
        )
    if op == "barrier":
        return dist.barrier(group=group, async_op=is_async)
    raise ValueError(f"unknown op {op}")


def _batch(actions: list, start: int, groups: dict) -> tuple[int, list]:
    """Consecutive p2p ops with one `batch` name go out in one batch_isend_irecv."""
    name = actions[start]["batch"]
    end = start
    ops = []
    while end < len(actions) and actions[end].get("batch") == name:
        a = actions[end]
        fn = dist.isend if a["op"] in ("isend", "send") else dist.irecv
        group = groups[a.get("group", "WORLD")]
        ops.append(dist.P2POp(fn, _tensor(a), a["peer"], group, a.get("tag", 0)))
        end += 1
    return end, dist.batch_isend_irecv(ops)


EXIT_OK, EXIT_HANG, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3
HANG_STATUSES = ("timeout", "closed")
FAILED_STATUSES = ("error", "crashed")


def exit_code(statuses: list[str]) -> int:
    """The script's exit code for what the ranks did (see the module docstring)."""
    if any(s in FAILED_STATUSES for s in statuses):
        return EXIT_FAILED
    if any(s in HANG_STATUSES for s in statuses):
        return EXIT_HANG
    return EXIT_OK


def _classify(exc: BaseException) -> str:
    text = str(exc).lower()
    if "timed out" in text or "timeout" in text:
        return "timeout"
    if "connection closed" in text or "connection reset" in text:
        return "closed"  # a peer gave up (timed out or died) while this rank waited on it
    return "error"


def run_case(case: dict, rank: int, timeout: float, progress) -> dict:
    td = datetime.timedelta(seconds=timeout)
    world = list(range(case["world_size"]))
    groups = {"WORLD": dist.new_group(world, timeout=td)}
    members = {"WORLD": world}
    for name in sorted(case.get("groups", {})):
        members[name] = case["groups"][name]
        groups[name] = dist.new_group(members[name], timeout=td)
    actions = case["ranks"].get(str(rank), case["ranks"].get(rank, []))
    handles: dict = {}
    i = 0
    try:
        while i < len(actions):
            a = actions[i]
            progress(i)
            if a.get("batch") is not None and a["op"] in ("send", "recv", "isend", "irecv"):
                end, works = _batch(actions, i, groups)
                for k, w in zip(range(i, end), works, strict=True):
                    if actions[k].get("handle"):
                        handles[actions[k]["handle"]] = w
                    elif actions[k]["op"] in ("send", "recv"):
                        progress(k)
                        w.wait()
                i = end
                continue
            if a["op"] == "wait":
                for h in a["handles"]:
                    work = handles.get(h)
                    if work is not None:  # None: the op was skipped by a non-member
                        work.wait()
            elif a["op"] != "sync":  # device sync: nothing to wait for on gloo
                work = _issue(a, rank, groups, members)
                if a.get("handle") is not None:
                    handles[a["handle"]] = work
            i += 1
    except Exception as exc:  # the outcome we are here to observe
        return {"status": _classify(exc), "action": i, "message": str(exc).splitlines()[0][:300]}
    return {"status": "finished", "action": None, "message": None}


def rank_main(rank: int, world_size: int, store, cases: list, timeout: float, out_dir: str | None):
    td = datetime.timedelta(seconds=timeout)
    if store is None:  # torchrun: MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE in the environment
        dist.init_process_group("gloo", timeout=td)
        store = dist.distributed_c10d._get_default_store()
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world_size, store=store, timeout=td)
    progress_path = os.path.join(out_dir, f"progress.{rank}") if out_dir else None

    def progress(case_index: int):
        def mark(action: int) -> None:
            if progress_path:
                with open(progress_path, "w") as fh:
                    fh.write(f"{case_index} {action}")

        return mark

    results = []
    for k, case in enumerate(cases):
        if case["world_size"] != world_size:
            continue
        outcome = run_case(case, rank, timeout, progress(k))
        outcome.update(case=case.get("name", str(k)), rank=rank)
        results.append(outcome)
        print("COMMLINT-REPLAY " + json.dumps(outcome), flush=True)
        if out_dir:
            with open(os.path.join(out_dir, f"result.{rank}.jsonl"), "a") as fh:
                fh.write(json.dumps(outcome) + "\n")
        # Stay alive until every rank is done with this case (see the module docstring).
        store.set(f"commlint/case{k}/done/{rank}", "1")
        keys = [f"commlint/case{k}/done/{r}" for r in range(world_size)]
        store.wait(keys, datetime.timedelta(seconds=timeout * 4 + 60))
    sys.stdout.flush()
    os._exit(exit_code([r["status"] for r in results]))


def spawn(cases: list, world_size: int, timeout: float, out_dir: str | None) -> int:
    """`python repro.py`: one forked process per rank, a store in this process."""
    store = dist.TCPStore("127.0.0.1", 0, world_size, True, wait_for_workers=False)
    ctx = multiprocessing.get_context("fork")
    procs = []
    for rank in range(world_size):
        client = dist.TCPStore("127.0.0.1", store.port, world_size, False)
        p = ctx.Process(target=rank_main, args=(rank, world_size, client, cases, timeout, out_dir))
        p.start()
        procs.append(p)
    deadline = time.monotonic() + sum(timeout * 4 + 60 for c in cases)
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
        if any(p.exitcode not in (None, 0) for p in procs):
            # A rank died (gloo aborts on some size mismatches): its peers cannot finish the
            # remaining cases; give them one timeout to report, then stop.
            deadline = min(deadline, time.monotonic() + timeout + 2)
        time.sleep(0.05)
    stuck = [p for p in procs if p.is_alive()]
    for p in stuck:
        p.kill()
    for p in procs:
        p.join()
    codes = [p.exitcode for p in procs if p not in stuck]
    if any(c is not None and (c < 0 or c == EXIT_FAILED) for c in codes):
        return EXIT_FAILED  # a rank raised, or its process died (a signal: gloo aborted)
    if stuck or EXIT_HANG in codes:
        return EXIT_HANG
    return EXIT_OK


def main(cases: list, default_timeout: float) -> int:
    parser = argparse.ArgumentParser(description="Replay of a commlint trace with gloo on CPU.")
    parser.add_argument("--timeout", type=float, default=default_timeout, help="seconds per op")
    parser.add_argument("--results", help="folder for per-rank result files")
    parser.add_argument("--world-size", type=int, help="run only the cases of this world size")
    args = parser.parse_args()
    if args.results:
        os.makedirs(args.results, exist_ok=True)
    if "RANK" in os.environ:  # under torchrun; rank_main leaves with the rank's exit code
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        rank_main(rank, world, None, cases, args.timeout, args.results)
        return EXIT_FAILED  # not reached: rank_main leaves through os._exit
    sizes = sorted({c["world_size"] for c in cases})
    if args.world_size is not None:
        sizes = [args.world_size]
    codes = [
        spawn([c for c in cases if c["world_size"] == w], w, args.timeout, args.results)
        for w in sizes
    ]
    if EXIT_FAILED in codes:
        return EXIT_FAILED
    return EXIT_HANG if EXIT_HANG in codes else EXIT_OK
