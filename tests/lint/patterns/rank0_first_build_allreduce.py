from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist


class Builder:
    def build_splits(self, path, splits, synchronize_ranks=True):
        if torch.distributed.is_initialized() and not self.built_on_this_rank():
            for i in range(len(splits)):
                if splits[i] is not None and synchronize_ranks:
                    torch.distributed.all_reduce(torch.ones(1))
            return [None] * len(splits)
        return [open(path).read() for _ in splits]

    def build_parallel(self, paths, splits, workers):
        def helper(out, num_workers):
            with ThreadPoolExecutor(max_workers=num_workers) as executor:
                futures = [executor.submit(self.build_splits, p, splits, True) for p in paths]
                for future in futures:
                    try:
                        out.append(future.result())
                    except Exception as err:
                        raise err

        datasets = []
        if torch.distributed.is_initialized():
            rank = torch.distributed.get_rank()
            if rank == 0:
                helper(datasets, workers * 2)
            torch.distributed.barrier()
            if rank != 0:
                helper(datasets, workers)
        else:
            helper(datasets, workers)
        return datasets
