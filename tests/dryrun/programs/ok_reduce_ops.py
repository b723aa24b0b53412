"""Correct: every reduce op delivers what a real backend delivers; the program checks it,
and agrees on a step count with all_reduce(MIN) of each rank's own batch count."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
expected = {
    dist.ReduceOp.SUM: sum(r + 1 for r in range(world)),
    dist.ReduceOp.PRODUCT: 2.0 if world == 2 else None,
    dist.ReduceOp.MIN: 1,
    dist.ReduceOp.MAX: world,
}
for op, want in expected.items():
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t, op=op)
    assert want is None or t.item() == want, (op, t.item(), want)
bits = torch.tensor([1 << rank])
dist.all_reduce(bits, op=dist.ReduceOp.BOR)
assert bits.item() == (1 << world) - 1, bits.item()
flags = torch.tensor([0b11 if rank == 0 else 0b10])
dist.all_reduce(flags, op=dist.ReduceOp.BAND)
assert flags.item() == 0b10, flags.item()
parity = torch.tensor([1])
dist.all_reduce(parity, op=dist.ReduceOp.BXOR)
assert parity.item() == world % 2, parity.item()

local_batches = 3 + rank  # every rank holds a different amount of data
steps = torch.tensor(local_batches)
dist.all_reduce(steps, op=dist.ReduceOp.MIN)
for _ in range(int(steps)):
    dist.all_reduce(torch.ones(16))
dist.destroy_process_group()
