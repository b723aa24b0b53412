"""Causes of misses and false alarms found on the real-issue reproductions
(bench/accuracy/real_issues), each reduced to the smallest program that shows it: the finding
the per-rank evaluation now makes, or the false one it no longer makes."""

from __future__ import annotations

from pathlib import Path

from tests.lint.helpers import lint_source

HEAD = """
import torch
import torch.distributed as dist
"""


def _codes(text: str, tmp_path: Path) -> list[str]:
    return sorted(f.code for f in lint_source(HEAD + text, tmp_path).findings)


# ---------------------------------------------------------------- tests of an agreed value
# `batches` differs between ranks but has 3 items on each; the skip flag is all-reduced, so
# every rank skips or runs each micro-batch together: exploring both arms of the test proves it
AGREED_SKIP = """

def agree(ok):
    flag = torch.tensor(int(ok))
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def main():
    rank = dist.get_rank()
    batches = [[8, 6], [9, 7], [5, 8]] if rank == 0 else [[7, 9], [2, 3], [6, 6]]
    grad = torch.zeros(4)
    for batch in batches:
        if not agree(min(batch) >= 4):
            continue
        dist.all_reduce(grad)


if __name__ == "__main__":
    main()
"""


def test_a_test_of_an_all_reduced_flag_is_explored_arm_by_arm(tmp_path: Path) -> None:
    assert _codes(AGREED_SKIP, tmp_path) == []
    # without the agreement each rank skips on its own data: the same loop hangs
    local = AGREED_SKIP.replace("if not agree(min(batch) >= 4):", "if min(batch) < 4:")
    assert "CL103" in _codes(local, tmp_path)


HELPER_SUM = """

def sum_loss(loss):
    total = loss.detach().clone()
    dist.all_reduce(total)
    return total


def main():
    w = torch.ones(8)
    for step in range(3):
        loss = (torch.randn(4, 8) @ w).mean()
        if torch.isnan(sum_loss(loss)):
            continue
        grad = torch.randn(8)
        dist.all_reduce(grad)


if __name__ == "__main__":
    main()
"""


def test_a_helper_that_all_reduces_returns_an_agreed_value(tmp_path: Path) -> None:
    assert _codes(HELPER_SUM, tmp_path) == []
    local = HELPER_SUM.replace("torch.isnan(sum_loss(loss))", "torch.isnan(loss)")
    assert _codes(local, tmp_path) == ["CL103"]


def test_a_flag_written_by_a_collective_forgets_its_literal_elements(tmp_path: Path) -> None:
    # rank 0's flag starts at 1, rank 1's at 0; after the all_reduce both read the sum
    src = """

def main():
    rank = dist.get_rank()
    flag = torch.tensor([1 if rank == 0 else 0])
    dist.all_reduce(flag)
    if flag.item():
        dist.barrier()


if __name__ == "__main__":
    main()
"""
    assert _codes(src, tmp_path) == []


# ---------------------------------------------------------------- dtypes and roots
def test_a_tensor_of_an_unknown_number_has_no_dtype_to_mismatch(tmp_path: Path) -> None:
    src = """
import os


def main():
    rank = dist.get_rank()
    flag = torch.tensor([int(os.path.exists("ckpt")) if rank == 0 else 0])
    dist.broadcast(flag, src=0)


if __name__ == "__main__":
    main()
"""
    assert _codes(src, tmp_path) == []
    mixed = src.replace("int(os.path.exists(", "float(os.path.exists(").replace(
        " else 0]", " else 0.5]"
    )
    assert _codes(mixed, tmp_path) == []  # both float: still nothing to report
    literal = src.replace('int(os.path.exists("ckpt"))', "1.5")
    assert _codes(literal, tmp_path) == ["CL116"]  # float32 on rank 0, int64 elsewhere


def test_group_src_given_by_the_caller_is_not_judged_by_its_name(tmp_path: Path) -> None:
    src = """

def bcast(pg, rank, obj):
    out = [obj if pg.rank() == rank else None]
    dist.broadcast_object_list(out, group=pg, group_src=rank)
    return out[0]
"""
    assert _codes(src, tmp_path) == []
    own = src.replace("group_src=rank)", "group_src=dist.get_rank())")
    assert "CL106" in _codes(own, tmp_path)


# ---------------------------------------------------------------- data chosen by the rank
def test_a_stop_flag_from_a_rank_sliced_sequence_steers_the_loop(tmp_path: Path) -> None:
    src = """

class Stopper:
    def __init__(self):
        self.stop = False

    def update(self, acc):
        if acc > 0.52:
            self.stop = True


def main():
    rank = dist.get_rank()
    val = torch.linspace(0, 1, 16)[rank::2]
    stopper = Stopper()
    for epoch in range(6):
        dist.all_reduce(torch.ones(2))
        stopper.update(float(val.mean()) + 0.01 * epoch)
        if stopper.stop:
            break


if __name__ == "__main__":
    main()
"""
    assert _codes(src, tmp_path) == ["CL103"]
    agreed = src.replace("[rank::2]", "[0::2]")
    assert _codes(agreed, tmp_path) == []


ITERABLE = """
from torch.utils.data import DataLoader, IterableDataset


class Shard(IterableDataset):
    def __init__(self, rank):
        self.length = 6 + 2 * rank

    def __iter__(self):
        for i in range(self.length):
            yield torch.randn(4)


def main():
    loader = DataLoader(Shard(dist.get_rank()), batch_size=2)
    for batch in loader:
        dist.all_reduce(batch.sum(0))


if __name__ == "__main__":
    main()
"""


def test_an_iterable_dataset_yields_each_rank_its_own_count(tmp_path: Path) -> None:
    assert _codes(ITERABLE, tmp_path) == ["CL115"]
    even = ITERABLE.replace("6 + 2 * rank", "6 + 0 * rank")
    assert _codes(even, tmp_path) == []


def test_per_rank_keys_of_a_dict_filled_from_literal_labels(tmp_path: Path) -> None:
    src = """

def main():
    rank = dist.get_rank()
    labels = torch.tensor([0, 1, 2, 0, 1, 0, 1, 1])[rank % 2 :: 2]
    logged = {}
    for y in labels.tolist():
        logged.setdefault("loss", 0)
        if y == 2:
            logged["class2"] = 1
    for key in sorted(logged):
        dist.all_reduce(torch.ones(1))


if __name__ == "__main__":
    main()
"""
    assert _codes(src, tmp_path) == ["CL115"]
    every = src.replace("[0, 1, 2, 0, 1, 0, 1, 1]", "[0, 2, 2, 0, 1, 2, 1, 1]")
    assert _codes(every, tmp_path) == []  # class 2 reaches every rank


# ---------------------------------------------------------------- modules in torch containers
SEQUENTIAL = """

class SyncNorm(torch.nn.Module):
    def forward(self, x):
        dist.all_reduce(x)
        return x


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Sequential(torch.nn.Linear(6, 6), SyncNorm())
        self.iter = 0

    def forward(self, x):
        if self.iter != 0:
            x = self.head(x)
        self.iter += 1
        return x


def main():
    model = Model()
    model.iter = 3 * dist.get_rank()
    for _ in range(3):
        model(torch.randn(4, 6))


if __name__ == "__main__":
    main()
"""


def test_a_collective_in_a_module_inside_nn_sequential_is_followed(tmp_path: Path) -> None:
    assert _codes(SEQUENTIAL, tmp_path) == ["CL115"]
    fixed = SEQUENTIAL.replace("model.iter = 3 * dist.get_rank()", "model.iter = 3")
    assert _codes(fixed, tmp_path) == []


def test_a_collective_in_a_module_inside_nn_modulelist_is_followed(tmp_path: Path) -> None:
    src = SEQUENTIAL.replace(
        "torch.nn.Sequential(torch.nn.Linear(6, 6), SyncNorm())",
        "torch.nn.ModuleList([SyncNorm(), torch.nn.Linear(6, 6)])",
    ).replace("x = self.head(x)", "x = self.head[0](x)")
    assert _codes(src, tmp_path) == ["CL115"]


def test_a_loop_over_equal_length_lists_chosen_by_rank_runs_alike(tmp_path: Path) -> None:
    # 3 micro-batches on every rank: the loop's count is not what differs; the per-rank
    # `except ...: continue` is, and the per-rank trace names it
    src = """

class Empty(Exception):
    pass


def valid(batch):
    out = [n for n in batch if n >= 4]
    if not out:
        raise Empty
    return out


def main():
    rank = dist.get_rank()
    batches = [[8, 6], [9, 7], [5, 8]] if rank == 0 else [[7, 9], [2, 3], [6, 6]]
    for batch in batches:
        try:
            valid(batch)
        except Empty:
            continue
        dist.all_reduce(torch.zeros(4))


if __name__ == "__main__":
    main()
"""
    assert _codes(src, tmp_path) == ["CL115"]
    uneven = src.replace("[[7, 9], [2, 3], [6, 6]]", "[[7, 9], [6, 6]]").replace("[2, 3]", "[2]")
    assert "CL101" in _codes(uneven, tmp_path)  # 3 iterations on rank 0, 2 elsewhere


def test_micro_batches_from_split_retry_a_rank_dependent_number_of_times(tmp_path: Path) -> None:
    # rank 1's capacity is smaller: it halves its micro-batch and all-reduces more often
    src = """

class OOM(RuntimeError):
    pass


def step(mb, capacity):
    if mb.shape[0] > capacity:
        raise OOM("out of memory")
    dist.all_reduce(mb.mean(0))


def train(batch, size, capacity):
    while True:
        try:
            for mb in batch.split(size):
                step(mb, capacity)
            return size
        except OOM:
            size //= 2


def main():
    capacity = 8 if dist.get_rank() == 0 else 4
    train(torch.randn(16, 4), 8, capacity)


if __name__ == "__main__":
    main()
"""
    assert _codes(src, tmp_path) == ["CL115"]
    same = src.replace("8 if dist.get_rank() == 0 else 4", "8")
    assert _codes(same, tmp_path) == []
    chunks = src.replace("batch.split(size)", "torch.chunk(batch, 16 // size)")
    assert _codes(chunks, tmp_path) == ["CL115"]


def test_inputs_and_targets_chunked_alike_pair_up(tmp_path: Path) -> None:
    # the inputs' shape is known, the targets' is not: both still make 3 micro-batches
    src = """

def main():
    rank = dist.get_rank()
    x = torch.randn(12, 4)
    y = x[:, :2].sum(dim=1, keepdim=True)
    if rank == 0:
        for mb in x.chunk(3):
            dist.send(mb, dst=1)
    else:
        for tgt in y.chunk(3):
            dist.recv(torch.empty(4, 4), src=0)


if __name__ == "__main__":
    main()
"""
    assert _codes(src, tmp_path) == []


# ---------------------------------------------------------------- which divergence is the cause
# corpus/proj_stats_on_leader: rank 0 alone all-reduces a statistic (#3, a hang: the others are
# in their barrier), then every rank syncs `nn.Linear(4, 1)`'s gradients, whose sizes are known:
# paired by sequence number, those all-reduces differ in size (#5). The ranks parted at #3.
def _checker_finding(code: str, first: int):
    from commlint.findings import Finding, Location

    actions = [Location(rank=r, action=first + r) for r in range(2)]
    return Finding(code=code, severity="error", message="", actions=actions)


def test_the_earlier_divergence_is_the_root_cause():
    from commlint.lint.perrank_check import _consequence

    hang, mismatch = _checker_finding("CL203", 2), _checker_finding("CL204", 4)
    assert _consequence([hang, mismatch]) == "CL116"  # reported: the hang at #3
    early_mismatch = _checker_finding("CL204", 0)
    assert _consequence([hang, early_mismatch]) == "CL115"  # reported: the mismatch
    assert _consequence([mismatch]) == "CL115"
    assert _consequence([hang]) == ""
