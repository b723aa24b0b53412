"""SketchDLC per-node trace files for a synchronous parameter-server job (paper §4.1 format).

Workers push each key's gradient, wait for the ack, pull, and wait for the parameters; the
server acks a key's pushes only after every worker pushed it (synchronous mode), then answers
pulls. `skip` drops one worker's push (and what follows it) of one key in one iteration —
a worker whose sparse gradient had no entry for that key.
"""

from __future__ import annotations

from pathlib import Path

HEADER = (
    "== num_workers:= {w} num_servers:= 1 worker_hostname:= GPU-1-12 "
    "Worker_ID:= {wids} Server_ID:= {sid},\n"
    "== num_pp:= -15: Initialize Server 0: setup messages "
    "odd (even): push_operation even (odd): pull_operation\n"
    "== op_id: (key-operation_num-role)\n"
    "id\tsrc\tdst\tlength\tnum_pp\toperation\top_id\tdep_type\td_time\ttime_sec\ttime_usec\tid_dep\n"
)


def write_job(
    folder: Path,
    workers: int = 2,
    keys: int = 3,
    iterations: int = 2,
    skip: tuple[int, int, int] | None = None,
) -> Path:
    """Files `worker_{w}.txt` and `server_0.txt`; `skip` = (worker, iteration, key)."""
    folder.mkdir(parents=True, exist_ok=True)
    server = workers
    rows: dict[int, list[str]] = {n: [] for n in range(workers + 1)}
    t = [1516622729, 0]

    def rec(node, src, dst, length, num_pp, op, key, opnum, role):
        t[1] += 100
        i = len(rows[node])
        fields = [i, src, dst, length, num_pp, f"OP:= {op}", f"{key}-{opnum}-{role}", 0, 0]
        rows[node].append("\t".join(map(str, [*fields, t[0], t[1], -1])))

    rows[0].append(f"0\t0\t{server}\t25\t0\tOP:= SendCom_TO_Servers")
    rows[0].append(f"1\t{server}\t0\t28\t0\tOP:= SendCom_To_Servers")
    rows[server].append(f"0\t0\t{server}\t25\t0\tOP:= SendCom_TO_Servers")
    rows[server].append(f"1\t{server}\t0\t28\t0\tOP:= SendCom_To_Servers")
    for it in range(iterations):
        for k in range(keys):
            opnum = 4 * it
            pushing = [w for w in range(workers) if skip != (w, it, k)]
            for w in pushing:
                rec(w, w, server, 1000 + k, 2 * it + 1, "Push_Send_Worker", k, opnum, "s0")
                rec(server, w, server, 1000 + k, 2 * it + 1, "Push_Recv_Server", k, opnum, f"w{w}")
            if len(pushing) < workers:
                # synchronous mode: the server waits for the missing push before it acks
                missing = skip[0]
                rec(
                    server,
                    missing,
                    server,
                    1000 + k,
                    2 * it + 1,
                    "Push_Recv_Server",
                    k,
                    opnum,
                    f"w{missing}",
                )
            for w in pushing:
                rec(server, server, w, 19, 2 * it + 1, "Push_Send_Server", k, opnum + 1, f"w{w}")
                rec(w, server, w, 19, 2 * it + 1, "Push_Recv_Worker", k, opnum + 1, "s0")
                rec(w, w, server, 28, 2 * it + 2, "Pull_Send_Worker", k, opnum + 2, "s0")
                rec(server, w, server, 28, 2 * it + 2, "Pull_Recv_Server", k, opnum + 2, f"w{w}")
                rec(
                    server,
                    server,
                    w,
                    1003 + k,
                    2 * it + 2,
                    "Pull_Send_Server",
                    k,
                    opnum + 3,
                    f"w{w}",
                )
                rec(w, server, w, 1003 + k, 2 * it + 2, "Pull_Recv_Worker", k, opnum + 3, "s0")
    head = HEADER.format(w=workers, wids=",".join(map(str, range(workers))) + ",", sid=server)
    for n, lines in rows.items():
        name = f"worker_{n}.txt" if n < workers else "server_0.txt"
        (folder / name).write_text(head + "\n".join(lines) + "\n")
    return folder
