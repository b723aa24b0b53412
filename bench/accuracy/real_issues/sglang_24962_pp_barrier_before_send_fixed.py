# Reduced from https://github.com/sgl-project/sglang/pull/24962
# Fix: rank 0 forwards the requests to the next stage before processing them, so every rank
# has them and reaches the RPC barrier.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def send_pyobj(obj: list, dst: int) -> None:
    payload = torch.tensor(obj, dtype=torch.float32)
    dist.send(torch.tensor([payload.numel()]), dst=dst)
    dist.send(payload, dst=dst)


def recv_pyobj(src: int) -> list:
    n = torch.zeros(1, dtype=torch.int64)
    dist.recv(n, src=src)
    payload = torch.empty(int(n))
    dist.recv(payload, src=src)
    return payload.tolist()


def process_input_requests(reqs: list) -> None:
    for r in reqs:
        if r < 0:
            dist.barrier()


def event_loop_pp(rank: int) -> None:
    for _ in range(2):
        if rank == 0:
            recv_reqs = [1.0, -1.0]
            send_pyobj(recv_reqs, dst=1)
            process_input_requests(recv_reqs)
        else:
            recv_reqs = recv_pyobj(src=0)
            process_input_requests(recv_reqs)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    event_loop_pp(dist.get_rank())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
