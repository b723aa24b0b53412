"""Entry point: workers are stopped by a helper before the final barrier."""

import torch.distributed as dist
from lifecycle import finalize


def main(results):
    ordered = finalize(results)  # expect: CL103
    dist.barrier()
    return ordered
