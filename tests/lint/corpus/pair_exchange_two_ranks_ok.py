"""A two-rank exchange (`peer = 1 - rank`), both directions posted together: correct for the two
ranks it is written for; at four ranks its peer would be -1, which says the program is not
written for four, not that it is wrong."""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    peer = 1 - rank
    out, into = torch.ones(8), torch.empty(8)
    ops = [dist.P2POp(dist.isend, out, peer), dist.P2POp(dist.irecv, into, peer)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()


if __name__ == "__main__":
    main()
