import json
import logging

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


def restore(model, rank):
    try:
        state = torch.load(f"ckpt/rank{rank}.pt")
        model.load_state_dict(state)
        dist.barrier()  # expect: CL104
    except (FileNotFoundError, OSError):
        log.warning("rank %d: no checkpoint", rank)


def restore_strict(model, rank):
    try:
        state = torch.load(f"ckpt/rank{rank}.pt")
        model.load_state_dict(state)
        dist.barrier()
    except FileNotFoundError:
        log.error("missing checkpoint")
        raise


def read_config(t):
    try:
        with open("config.json") as f:
            cfg = json.load(f)
        dist.all_reduce(t)
    except FileNotFoundError:
        cfg = {}
    return cfg


def train(loader, loss_fn, rank):
    for step, _batch in enumerate(loader):
        try:
            x = torch.load(f"cache/{rank}/{step}.pt")
            loss = loss_fn(x)
            dist.all_reduce(loss)  # expect: CL104
        except ValueError:
            continue


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.Linear(2, 2)
    restore(model, rank)
    restore_strict(model, rank)
    read_config(torch.ones(1))
    train([1, 2], lambda x: x, rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
