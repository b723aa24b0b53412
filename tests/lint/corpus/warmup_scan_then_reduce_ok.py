"""Each rank scans its own calibration rows until one exceeds a bound (a rank-local break),
but the scan communicates nothing: every rank all-reduces its count after the loop, and
returns early only after it."""

import torch
import torch.distributed as dist


def calibrate(rows):
    seen = 0
    for row in rows:
        if row.max().item() > 2.5:
            break
        seen += 1
    count = torch.tensor([float(seen)])
    dist.all_reduce(count)
    if rows.sum().item() > 0:
        return count
    return count * 0


def main():
    dist.init_process_group("gloo")
    gen = torch.Generator().manual_seed(dist.get_rank())
    calibrate(torch.randn(16, 4, generator=gen))
    dist.barrier()


if __name__ == "__main__":
    main()
