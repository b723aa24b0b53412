"""Rank 0 hands its feature table to rank 1 in rows aligned to the block size given on the
command line; rank 1 allocates the same aligned table."""

import argparse

import torch
import torch.distributed as dist


def aligned(rows, block):
    return (rows + block - 1) // block * block


def main():
    cli = argparse.ArgumentParser()
    cli.add_argument("--rows", type=int, default=300)
    cli.add_argument("--block-rows", type=int, default=64)
    cli.add_argument("--dim", default="32", type=int)
    opts = cli.parse_args()
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        table = torch.zeros(aligned(opts.rows, opts.block_rows), opts.dim)
        dist.send(table, dst=1)
    elif dist.get_rank() == 1:
        table = torch.empty(aligned(opts.rows, opts.block_rows), opts.dim)
        dist.recv(table, src=0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
