"""Generate the accuracy benchmark's distributed training programs (dl2 §5, reproduced).

Each program is a small model (an MLP, a GPT-like block stack, an encoder-decoder pipeline,
a convolutional net with parallel branches, hierarchical collectives built from p2p and plain
collectives, a DDP model) with data/tensor/pipeline parallelism written by hand with
`torch.distributed`, at world size 2, 4, 6 or 8, with at most one communication mutation
drawn from the bug classes of the seed notes. Some mutations are harmless by construction
(every rank still issues matching communication); they must not be flagged.

Every program is a standalone script (`torchrun --nproc-per-node W prog.py`) and importable:
`main(rank, world_size)` creates its own groups with `new_group(..., timeout=TIMEOUT)`, never
uses the default group, and returns `(key, value)` checks — ranks that share a key must
hold equal values (replicas, all-reduced outputs), which is how silent corruption is seen.

    python -m bench.accuracy.generate            # writes bench/accuracy/programs/
    python -m bench.accuracy.generate --count 560 --seed 7
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "programs"
MANIFEST = HERE / "programs.json"

WORLD_SIZES = (2, 4, 6, 8)
WORLD_WEIGHTS = (0.36, 0.36, 0.14, 0.14)  # real runs stay small: most at 2-4 ranks
FAMILIES = ("mlp", "gpt", "encdec", "convnet", "hier", "ddp")
HIER_OPS = ("allreduce", "allgather", "broadcast", "reducescatter", "alltoall")

# Mutation classes, after the bug classes of the seed notes (003) and dl2's mutations.
CLASSES = (
    "drop",
    "duplicate",
    "reorder",
    "rank_cond",
    "data_cond",
    "wrong_group",
    "wrong_root",
    "dtype",
    "size",
    "splits",
    "sendrecv_swap",
    "early_exit",
    "raise_mid",
    "main_helper",
)
IN_PLACE = {"all_reduce", "broadcast", "reduce"}
# A whole step, its collectives hidden in the library or framework.
STEPS_OPS = {"ddp_step", "module_step", "acc_step", "lit_step", "hf_step", "tt_step"}
COLLECTIVES = IN_PLACE | {"all_gather", "reduce_scatter", "all_to_all_single", "barrier"}
COLLECTIVES |= {"acc_gather", "lit_gather", "lit_log", "hf_gather", "tt_mean", "tt_max"}


@dataclass(frozen=True)
class Comm:
    """One communication site of a program, rendered to source by `render_comm`."""

    site: str
    op: str
    t: str = ""
    g: str = "world"
    root: str | None = None  # src/dst of rooted collectives, peer of p2p (a global rank)
    alt_root: str | None = None  # another member of the group, for wrong_root
    alt_group: str | None = None  # a group that differs for some callers, for wrong_group
    twin: str | None = None  # a group with the same members, for harmless wrong_group
    out: str | None = None
    who: str = "all"  # which ranks execute this site: all, even, odd
    pre: tuple[str, ...] = ()  # computation that belongs to the site (moves with it)
    in_loop: bool = True
    extra: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Line:
    indent: int
    text: str


Item = Line | tuple  # tuple = (indent, Comm)


def step_lines(backward: str, model: str = "model", then: str | None = None) -> list[str]:
    """A training step whose collectives are hidden: loss, `backward`, (`then`), the update."""
    lines = [f"loss = ({model}(x) - 1.0).pow(2).mean()", backward]
    return [*lines, *([then] if then else []), "opt.step()", "opt.zero_grad()"]


def render_comm(c: Comm, indent: int, *, t: str | None = None, splits: str = "") -> list[Line]:
    """The source lines of one communication call."""
    t = t or c.t
    pre = [Line(indent, p) for p in c.pre]
    call: list[str]
    if c.op == "all_reduce":
        call = [f"dist.all_reduce({t}, group={c.g})"]
    elif c.op == "broadcast":
        call = [f"dist.broadcast({t}, src={c.root}, group={c.g})"]
    elif c.op == "reduce":
        call = [f"dist.reduce({t}, dst={c.root}, group={c.g})"]
    elif c.op == "barrier":
        call = [f"dist.barrier(group={c.g})"]
    elif c.op == "all_gather":
        call = [
            f"{c.out} = [torch.empty_like({t}) for _ in range(dist.get_world_size({c.g}))]",
            f"dist.all_gather({c.out}, {t}, group={c.g})",
        ]
    elif c.op == "reduce_scatter":
        call = [
            f"{c.out} = {t}.new_empty({t}.numel() // dist.get_world_size({c.g}))",
            f"dist.reduce_scatter_tensor({c.out}, {t}, group={c.g})",
        ]
    elif c.op == "all_to_all_single":
        if splits == "uneven-all":
            # Split j of every rank has j + 1 elements: consistent on every rank.
            call = [
                f"n = dist.get_world_size({c.g})",
                f"me = dist.get_rank({c.g})",
                f"{t} = torch.arange(n * (n + 1) // 2, dtype=torch.float32)",
                f"{c.out} = torch.empty(n * (me + 1))",
                f"dist.all_to_all_single({c.out}, {t}, output_split_sizes=[me + 1] * n, "
                f"input_split_sizes=[j + 1 for j in range(n)], group={c.g})",
                f"{c.out} = {c.out}[: 2 * n].contiguous() if {c.out}.numel() >= 2 * n "
                f"else torch.cat([{c.out}, {c.out}.new_zeros(2 * n - {c.out}.numel())])",
            ]
        elif splits == "uneven-one":
            # This rank sends one more element to its first peer than the peer expects.
            call = [
                f"n = dist.get_world_size({c.g})",
                f"{t} = torch.cat([{t}, {t}.new_zeros(1)])",
                f"{c.out} = torch.empty({t}.numel() - 1)",
                f"dist.all_to_all_single({c.out}, {t}, output_split_sizes=None, "
                f"input_split_sizes=[({t}.numel() - 1) // n + (j == 0) for j in range(n)], "
                f"group={c.g})",
            ]
        else:
            call = [
                f"{c.out} = torch.empty_like({t})",
                f"dist.all_to_all_single({c.out}, {t}, group={c.g})",
            ]
    elif c.op == "send":
        call = [f"dist.send({t}, dst={c.root}, group={c.g})"]
    elif c.op == "recv":
        call = [f"dist.recv({t}, src={c.root}, group={c.g})"]
    elif c.op == "module_step":
        call = [
            f"y = {t}(x)",
            "loss = (y - 1.0).pow(2).mean()",
            "loss.backward()",
            "opt.step()",
            "opt.zero_grad()",
        ]
    elif c.op == "acc_step":
        call = step_lines("accelerator.backward(loss)")
    elif c.op == "acc_gather":
        call = [f"{c.out} = accelerator.gather({t})"]
    elif c.op == "lit_step":
        call = step_lines("self.manual_backward(loss)")
    elif c.op == "lit_gather":
        call = [f"{c.out} = self.all_gather({t})"]
    elif c.op == "lit_log":
        call = [f'self.log("loss", {t}.sum(), sync_dist=True)']
    elif c.op == "hf_step":
        call = ["loss = super().training_step(model, inputs, num_items_in_batch)"]
    elif c.op == "hf_gather":
        call = [f"{c.out} = self.accelerator.gather({t})"]
    elif c.op == "tt_step":
        clip = "grad_norm = tt.clip_grad_norm_(net.parameters(), max_norm=1.0)"
        call = step_lines("loss.backward()", model="net", then=clip)
    elif c.op == "tt_mean":
        call = [f"{c.out} = tt.dist_mean({t}, mesh)"]
    elif c.op == "tt_max":
        call = [f"{c.out} = tt.dist_max({t}, mesh)"]
    elif c.op == "ddp_step":
        call = step_lines("loss.backward()")
    else:
        raise ValueError(f"unknown op {c.op}")
    return pre + [Line(indent, s) for s in call]


# ---------------------------------------------------------------------------------------------
# Families: setup lines, items before the loop, loop items, checks returned by main()

TP_SETUP = """\
world = dist.new_group(list(range(world_size)), timeout=timeout)
tp_group = dp_group = None
for start in range(0, world_size, TP):
    ranks = list(range(start, start + TP))
    group = dist.new_group(ranks, timeout=timeout)
    if rank in ranks:
        tp_group = group
for first in range(TP):
    ranks = list(range(first, world_size, TP))
    group = dist.new_group(ranks, timeout=timeout)
    if rank in ranks:
        dp_group = group
tp_rank, dp_rank = rank % TP, rank // TP
tp_leader = rank - tp_rank
dp_size = world_size // TP
probe_gen = torch.Generator().manual_seed(500 + rank)"""

TWIN_SETUP = {
    "world": "world_twin = dist.new_group(list(range(world_size)), timeout=timeout)",
    "tp_group": """\
tp_twin = None
for start in range(0, world_size, TP):
    ranks = list(range(start, start + TP))
    group = dist.new_group(ranks, timeout=timeout)
    if rank in ranks:
        tp_twin = group""",
    "dp_group": """\
dp_twin = None
for first in range(TP):
    ranks = list(range(first, world_size, TP))
    group = dist.new_group(ranks, timeout=timeout)
    if rank in ranks:
        dp_twin = group""",
    "pp_group": """\
pp_twin = None
for start in range(0, world_size, TP):
    ranks = list(range(start, start + TP))
    group = dist.new_group(ranks, timeout=timeout)
    if rank in ranks:
        pp_twin = group""",
    "leaders": "leaders_twin = dist.new_group(list(range(0, world_size, 2)), timeout=timeout)",
    "local_group": """\
local_twin = None
for start in range(0, world_size, 2):
    ranks = [start, start + 1]
    group = dist.new_group(ranks, timeout=timeout)
    if rank in ranks:
        local_twin = group""",
}
TWIN_NAME = {
    "world": "world_twin",
    "tp_group": "tp_twin",
    "dp_group": "dp_twin",
    "leaders": "leaders_twin",
    "local_group": "local_twin",
    "pp_group": "pp_twin",
}


@dataclass
class Family:
    name: str
    parallel: str
    setup: str
    pre: list  # items before the loop (indent 1)
    body: list  # items inside `for step in range(STEPS):` (indent 2 = loop level)
    checks: str  # the return expression
    reorder_pairs: list[tuple[str, str]] = field(default_factory=list)
    swap_pairs: list[tuple[str, str]] = field(default_factory=list)
    data_var: str = "x"
    preamble: str = ""  # module-level constants
    # Where the step's body runs: a loop in `main` by default; a framework's own step
    # method (a class in `main` whose method holds the body, one indent deeper) otherwise.
    loop: tuple[str, ...] = ("for step in range(STEPS):",)
    after: tuple[str, ...] = ()  # lines after the loop, in `main` (the framework's fit)
    leave: str = "break"  # how a rank leaves the step early


def L(indent: int, text: str) -> Line:
    return Line(indent, text)


def C(indent: int, comm: Comm) -> tuple:
    return (indent, comm)


def fam_mlp(world: int) -> Family:
    pre = [
        L(1, "torch.manual_seed(1000 + tp_rank)"),
        L(1, "w1 = torch.randn(8, 8 // TP) * 0.3"),
        L(1, "w2 = torch.randn(8 // TP, 8) * 0.3"),
        C(
            1,
            Comm(
                "init_bcast",
                "broadcast",
                "w1",
                "dp_group",
                root="tp_rank",
                alt_root="tp_rank + TP",
                alt_group="world",
                twin="dp_twin",
                in_loop=False,
            ),
        ),
        L(1, "gen = torch.Generator().manual_seed(100 + dp_rank)"),
    ]
    body = [
        L(2, "x = torch.randn(4, 8, generator=gen)"),
        L(2, "h = torch.relu(x @ w1)"),
        L(2, "y = h @ w2"),
        C(2, Comm("tp_ar", "all_reduce", "y", "tp_group", alt_group="world", twin="tp_twin")),
        L(2, "err = y - x"),
        L(2, "g2 = h.t() @ err / 4"),
        L(2, "g1 = x.t() @ ((err @ w2.t()) * (h > 0)) / 4"),
        C(2, Comm("dp_ar1", "all_reduce", "g1", "dp_group", alt_group="world", twin="dp_twin")),
        C(2, Comm("dp_ar2", "all_reduce", "g2", "dp_group", alt_group="tp_group", twin="dp_twin")),
        L(2, "w1 -= 0.05 * g1 / dp_size"),
        L(2, "w2 -= 0.05 * g2 / dp_size"),
        L(2, "loss = err.pow(2).mean().reshape(1)"),
        C(
            2,
            Comm("log_ar", "all_reduce", "loss", "world", alt_group="tp_group", twin="world_twin"),
        ),
        C(2, Comm("step_barrier", "barrier", "", "world", alt_group="dp_group", twin="world_twin")),
    ]
    checks = (
        # One check per weight: a swapped pair of same-size gradients keeps their total.
        '[(f"w1/tp{tp_rank}", float(w1.sum())), (f"w2/tp{tp_rank}", float(w2.sum())), '
        '(f"act/dp{dp_rank}", float(y.sum())), ("loss", float(loss.sum()))]'
    )
    return Family(
        "mlp",
        "dp+tp",
        TP_SETUP,
        pre,
        body,
        checks,
        reorder_pairs=[("dp_ar1", "dp_ar2"), ("log_ar", "step_barrier")],
    )


def fam_gpt(world: int) -> Family:
    pre = [
        L(1, "blocks = []"),
        L(1, "for layer in range(2):"),
        L(2, "torch.manual_seed(2000 + 10 * layer + tp_rank)"),
        L(2, "wq = torch.randn(8, 8 // TP) * 0.3"),
        L(2, "wo = torch.randn(8 // TP, 8) * 0.3"),
        L(2, "wf1 = torch.randn(8, 16 // TP) * 0.3"),
        L(2, "wf2 = torch.randn(16 // TP, 8) * 0.3"),
        L(2, "blocks.append((wq, wo, wf1, wf2))"),
        L(1, "gen = torch.Generator().manual_seed(100 + dp_rank)"),
    ]
    body = [
        L(2, "tokens = torch.randn(8, 8, generator=gen)"),
        C(
            2,
            Comm(
                "data_bcast",
                "broadcast",
                "tokens",
                "tp_group",
                root="tp_leader",
                alt_root="tp_leader + 1",
                alt_group="world",
                twin="tp_twin",
            ),
        ),
        L(2, "h = tokens"),
        L(2, "for wq, wo, wf1, wf2 in blocks:"),
        L(3, "a = torch.tanh(h @ wq) @ wo"),
        C(3, Comm("attn_ar", "all_reduce", "a", "tp_group", alt_group="dp_group", twin="tp_twin")),
        L(3, "h = h + a"),
        L(3, "f = torch.relu(h @ wf1) @ wf2"),
        C(3, Comm("mlp_ar", "all_reduce", "f", "tp_group", alt_group="world", twin="tp_twin")),
        L(3, "h = h + f"),
        L(2, "local = h[:, tp_rank * (8 // TP) : (tp_rank + 1) * (8 // TP)].contiguous()"),
        C(
            2,
            Comm(
                "seq_ag",
                "all_gather",
                "local",
                "tp_group",
                out="parts",
                alt_group="dp_group",
                twin="tp_twin",
            ),
        ),
        L(2, "h = torch.cat(parts, dim=1)"),
        L(2, "bucket = torch.stack([h.mean(), h.std(), h.abs().max()])"),
        L(2, "loss = h.pow(2).mean().reshape(1)"),
        C(
            2,
            Comm("grad_ar", "all_reduce", "bucket", "dp_group", alt_group="world", twin="dp_twin"),
        ),
        C(
            2,
            Comm("log_ar", "all_reduce", "loss", "world", alt_group="dp_group", twin="world_twin"),
        ),
        L(2, "for block in blocks:"),
        L(3, "for w in block:"),
        L(4, "w.mul_(1 - 0.01 * float(bucket[0]) / dp_size)"),
    ]
    checks = (
        '[(f"params/tp{tp_rank}", float(sum(w.sum() for b in blocks for w in b))), '
        '(f"act/dp{dp_rank}", float(h.sum())), ("loss", float(loss.sum()))]'
    )
    return Family(
        "gpt",
        "dp+tp",
        TP_SETUP,
        pre,
        body,
        checks,
        reorder_pairs=[("grad_ar", "log_ar")],
    )


def fam_encdec(world: int) -> Family:
    setup = TP_SETUP.replace("tp_group", "pp_group") + (
        "\nstage = rank % 2\npeer = rank + 1 if stage == 0 else rank - 1"
    )
    pre = [
        L(1, "torch.manual_seed(3000 + stage)"),
        L(1, "w = torch.randn(8, 8) * 0.3"),
        L(1, "gen = torch.Generator().manual_seed(100 + dp_rank)"),
    ]
    send = dict(g="pp_group", root="peer", twin="pp_twin", alt_group="world")
    body = [
        L(2, "mine = torch.tensor([float(step + stage)])"),
        L(2, "theirs = torch.empty(1)"),
        L(2, "if stage == 0:"),
        C(3, Comm("xchg_send_a", "send", "mine", who="even", **send)),
        C(3, Comm("xchg_recv_a", "recv", "theirs", who="even", **send)),
        L(2, "else:"),
        C(3, Comm("xchg_recv_b", "recv", "theirs", who="odd", **send)),
        C(3, Comm("xchg_send_b", "send", "mine", who="odd", **send)),
        L(2, "if stage == 0:"),
        L(3, "src = torch.randn(4, 8, generator=gen)"),
        L(3, "mem = torch.tanh(src @ w)"),
        L(3, "header = torch.tensor([float(mem.shape[0]), float(mem.shape[1])])"),
        C(3, Comm("enc_send_header", "send", "header", who="even", **send)),
        C(3, Comm("enc_send_mem", "send", "mem", who="even", **send)),
        L(3, "grad = torch.empty(4, 8)"),
        C(3, Comm("enc_recv_grad", "recv", "grad", who="even", **send)),
        L(3, "g = src.t() @ (grad * (1 - mem.pow(2))) / 4"),
        L(3, "out = mem"),
        L(2, "else:"),
        L(3, "header = torch.zeros(2)"),
        C(3, Comm("dec_recv_header", "recv", "header", who="odd", **send)),
        L(3, "mem = torch.empty(int(header[0]), int(header[1]))"),
        C(3, Comm("dec_recv_mem", "recv", "mem", who="odd", **send)),
        L(3, "out = mem @ w"),
        L(3, "grad = (out - 1.0) @ w.t() / 4"),
        C(3, Comm("dec_send_grad", "send", "grad", who="odd", **send)),
        L(3, "g = mem.t() @ (out - 1.0) / 4"),
        C(2, Comm("dp_ar", "all_reduce", "g", "dp_group", alt_group="world", twin="dp_twin")),
        L(2, "w -= 0.05 * g / dp_size"),
        L(2, "loss = out.pow(2).mean().reshape(1)"),
        C(
            2,
            Comm("log_ar", "all_reduce", "loss", "world", alt_group="dp_group", twin="world_twin"),
        ),
    ]
    checks = '[(f"params/stage{stage}", float(w.sum())), ("loss", float(loss.sum()))]'
    fam = Family(
        "encdec",
        "pp+dp",
        setup,
        pre,
        body,
        checks,
        swap_pairs=[("xchg_recv_b", "xchg_send_b"), ("xchg_send_a", "xchg_recv_a")],
        reorder_pairs=[("enc_send_header", "enc_send_mem")],
    )
    return fam


def fam_convnet(world: int) -> Family:
    pre = [
        L(1, "torch.manual_seed(4000 + tp_rank)"),
        L(1, "k1 = torch.randn(4, 3, 1, 1) * 0.3"),
        L(1, "k2 = torch.randn(4, 3, 3, 3) * 0.3"),
        L(1, "k3 = torch.randn(6, 3, 3, 3) * 0.3"),
        L(1, "k4 = torch.randn(2, 3, 1, 1) * 0.3"),
        L(1, "gen = torch.Generator().manual_seed(100 + dp_rank)"),
    ]
    tw = dict(twin="tp_twin")
    body = [
        L(2, "x = torch.randn(2, 3, 6, 6, generator=gen)"),
        # Inception-style block: four branches, each synchronised on its own group.
        C(
            2,
            Comm(
                "branch1",
                "all_reduce",
                "b1",
                "tp_group",
                alt_group="world",
                pre=("b1 = torch.nn.functional.conv2d(x, k1)",),
                **tw,
            ),
        ),
        C(
            2,
            Comm(
                "branch2",
                "all_reduce",
                "s2",
                "world",
                alt_group="tp_group",
                twin="world_twin",
                pre=(
                    "b2 = torch.nn.functional.conv2d(x, k2, padding=1)",
                    "s2 = torch.stack([b2.mean(), b2.var()])",
                ),
            ),
        ),
        C(
            2,
            Comm(
                "branch3",
                "all_reduce",
                "b3",
                "tp_group",
                alt_group="dp_group",
                pre=("b3 = torch.nn.functional.conv2d(x, k3, padding=1)",),
                **tw,
            ),
        ),
        C(
            2,
            Comm(
                "branch4",
                "all_reduce",
                "s4",
                "dp_group",
                alt_group="world",
                twin="dp_twin",
                pre=(
                    "b4 = torch.nn.functional.conv2d(x, k4)",
                    "s4 = torch.stack([b4.mean(), b4.var(), b4.abs().max()])",
                ),
            ),
        ),
        L(2, "grads = torch.stack([b1.mean(), b3.mean(), s2[0], s4[0]])"),
        C(2, Comm("grad_ar", "all_reduce", "grads", "dp_group", alt_group="world", twin="dp_twin")),
        L(2, "for k, gk in zip((k1, k2, k3, k4), grads):"),
        L(3, "k.sub_(0.01 * float(gk) / dp_size)"),
        C(2, Comm("step_barrier", "barrier", "", "world", alt_group="tp_group", twin="world_twin")),
    ]
    checks = (
        '[(f"params/tp{tp_rank}", float(k1.sum() + k2.sum() + k3.sum() + k4.sum())), '
        '(f"act/dp{dp_rank}", float(b1.sum() + b3.sum())), ("bn/world", float(s2.sum())), '
        '(f"bn/tp{tp_rank}", float(s4.sum()))]'
    )
    return Family(
        "convnet",
        "dp+tp, 4 branches",
        TP_SETUP,
        pre,
        body,
        checks,
        reorder_pairs=[
            ("branch1", "branch2"),
            ("branch2", "branch3"),
            ("branch3", "branch4"),
        ],
    )


HIER_SETUP = """\
world = dist.new_group(list(range(world_size)), timeout=timeout)
leaders = dist.new_group(list(range(0, world_size, 2)), timeout=timeout)
local_group = None
for start in range(0, world_size, 2):
    ranks = [start, start + 1]
    group = dist.new_group(ranks, timeout=timeout)
    if rank in ranks:
        local_group = group
is_leader = rank % 2 == 0
partner = rank + 1 if is_leader else rank - 1
probe_gen = torch.Generator().manual_seed(500 + rank)"""


def fam_hier(world: int, op: str) -> Family:
    p2p = dict(g="local_group", root="partner", twin="local_twin", alt_group="world")
    lead = dict(g="leaders", twin="leaders_twin", alt_group="world", who="even")
    pre = [L(1, "gen = torch.Generator().manual_seed(100 + rank)")]
    body: list = []
    checks = '[("v", float(v.sum()))]'
    reorder: list[tuple[str, str]] = []
    if op == "allreduce":
        body = [
            L(2, "v = torch.randn(4, generator=gen)"),
            L(2, "if is_leader:"),
            L(3, "buf = torch.empty(4)"),
            C(3, Comm("h_recv", "recv", "buf", who="even", **p2p)),
            L(3, "v += buf"),
            C(3, Comm("h_allreduce", "all_reduce", "v", **lead)),
            C(3, Comm("h_send", "send", "v", who="even", **p2p)),
            L(2, "else:"),
            C(3, Comm("h_send_up", "send", "v", who="odd", **p2p)),
            C(3, Comm("h_recv_down", "recv", "v", who="odd", **p2p)),
        ]
    elif op == "allgather":
        body = [
            L(2, "shard = torch.randn(2, generator=gen)"),
            L(2, "node = torch.empty(4)"),
            L(2, "if is_leader:"),
            L(3, "peer_shard = torch.empty(2)"),
            C(3, Comm("h_recv", "recv", "peer_shard", who="even", **p2p)),
            L(3, "node = torch.cat([shard, peer_shard])"),
            C(3, Comm("h_allgather", "all_gather", "node", out="nodes", **lead)),
            L(3, "v = torch.cat(nodes)"),
            L(2, "else:"),
            C(3, Comm("h_send_up", "send", "shard", who="odd", **p2p)),
            L(3, "v = torch.empty(2 * world_size)"),
            C(
                2,
                Comm(
                    "h_bcast",
                    "broadcast",
                    "v",
                    "local_group",
                    root="rank - rank % 2",
                    alt_root="rank - rank % 2 + 1",
                    alt_group="world",
                    twin="local_twin",
                ),
            ),
        ]
    elif op == "broadcast":
        body = [
            L(2, "v = torch.randn(4, generator=gen) if rank == 0 else torch.empty(4)"),
            L(2, "if is_leader:"),
            C(
                3,
                Comm("h_bcast", "broadcast", "v", root="0", alt_root="2", **lead),
            ),
            C(3, Comm("h_send", "send", "v", who="even", **p2p)),
            L(2, "else:"),
            C(3, Comm("h_recv_down", "recv", "v", who="odd", **p2p)),
        ]
    elif op == "reducescatter":
        body = [
            L(2, "v = torch.randn(2 * world_size, generator=gen)"),
            L(2, "if is_leader:"),
            L(3, "buf = torch.empty(2 * world_size)"),
            C(3, Comm("h_recv", "recv", "buf", who="even", **p2p)),
            L(3, "v = v + buf"),
            C(3, Comm("h_reducescatter", "reduce_scatter", "v", out="mine", **lead)),
            L(3, "keep, give = mine[:2].clone(), mine[2:].clone()"),
            C(3, Comm("h_send", "send", "give", who="even", **p2p)),
            L(3, "v = keep"),
            L(2, "else:"),
            C(3, Comm("h_send_up", "send", "v", who="odd", **p2p)),
            L(3, "v = torch.empty(2)"),
            C(3, Comm("h_recv_down", "recv", "v", who="odd", **p2p)),
            L(2, "total = v.sum().reshape(1)"),
            C(
                2,
                Comm(
                    "h_check",
                    "all_reduce",
                    "total",
                    "world",
                    alt_group="leaders",
                    twin="world_twin",
                ),
            ),
        ]
        checks = '[("total", float(total.sum()))]'
    elif op == "alltoall":
        body = [
            L(2, "v = torch.randn(2 * world_size, generator=gen)"),
            C(
                2,
                Comm(
                    "h_alltoall",
                    "all_to_all_single",
                    "v",
                    "world",
                    out="mixed",
                    alt_group="local_group",
                    twin="world_twin",
                ),
            ),
            L(2, "if is_leader:"),
            L(3, "other = torch.empty_like(mixed)"),
            C(3, Comm("h_send", "send", "mixed", who="even", **p2p)),
            C(3, Comm("h_recv", "recv", "other", who="even", **p2p)),
            L(2, "else:"),
            L(3, "other = torch.empty_like(mixed)"),
            C(3, Comm("h_recv_down", "recv", "other", who="odd", **p2p)),
            C(3, Comm("h_send_up", "send", "mixed", who="odd", **p2p)),
            L(2, "total = (mixed.sum() + other.sum()).reshape(1)"),
            C(
                2,
                Comm(
                    "h_check",
                    "all_reduce",
                    "total",
                    "world",
                    alt_group="leaders",
                    twin="world_twin",
                ),
            ),
        ]
        checks = '[("total", float(total.sum()))]'
        reorder = []
    body.append(
        C(2, Comm("step_barrier", "barrier", "", "world", alt_group="leaders", twin="world_twin"))
    )
    swaps = [("h_recv_down", "h_send_up")] if op == "alltoall" else []
    return Family(
        "hier",
        f"hierarchical {op}",
        HIER_SETUP,
        pre,
        body,
        checks,
        reorder_pairs=reorder,
        swap_pairs=swaps,
        data_var="v",
    )


# The small model and the per-rank data of the library and framework families.
SMALL_NET = (
    "net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))"
)


def local_data() -> list[Line]:
    return [
        L(1, "gen = torch.Generator().manual_seed(100 + rank)"),
        L(1, "loss = torch.zeros(())"),
    ]


DDP_SETUP = """\
world = dist.new_group(list(range(world_size)), timeout=timeout)
dp_group = dist.new_group(list(range(world_size)), timeout=timeout)
probe_gen = torch.Generator().manual_seed(500 + rank)"""


def fam_ddp(world: int) -> Family:
    pre = [
        L(1, "torch.manual_seed(5000)"),
        L(1, SMALL_NET),
        L(1, "model = torch.nn.parallel.DistributedDataParallel(net, process_group=dp_group)"),
        L(1, "opt = torch.optim.SGD(model.parameters(), lr=0.05)"),
        *local_data(),
    ]
    body = [
        L(2, "x = torch.randn(4, 8, generator=gen)"),
        C(2, Comm("ddp_step", "ddp_step", "", "dp_group")),
        L(2, "lossv = loss.detach().reshape(1)"),
        C(
            2,
            Comm("log_ar", "all_reduce", "lossv", "world", alt_group="dp_group", twin="world_twin"),
        ),
    ]
    checks = (
        '[("params", float(sum(p.sum() for p in net.parameters()))), ("loss", float(lossv.sum()))]'
    )
    return Family("ddp", "DDP", DDP_SETUP, pre, body, checks)


FSDP_SETUP = """\
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

world = dist.new_group(list(range(world_size)), timeout=timeout)
dp_group = dist.new_group(list(range(world_size)), timeout=timeout)
probe_gen = torch.Generator().manual_seed(500 + rank)"""


def fsdp2_model(seed: int) -> list[Line]:
    """The small net sharded with `fully_shard` over the dp group, its optimizer, the data."""
    return [
        L(1, f"torch.manual_seed({seed})"),
        L(1, SMALL_NET),
        L(1, 'mesh = DeviceMesh.from_group(dp_group, "cpu")'),
        L(1, "fully_shard(net[0], mesh=mesh)"),
        L(1, "fully_shard(net, mesh=mesh)"),
        L(1, "opt = torch.optim.SGD(net.parameters(), lr=0.05)"),
        *local_data(),
    ]


def fam_fsdp2(world: int) -> Family:
    pre = fsdp2_model(6000)
    body = [
        L(2, "x = torch.randn(4, 8, generator=gen)"),
        C(2, Comm("fsdp_step", "module_step", "net", "dp_group")),
        L(2, "lossv = loss.detach().reshape(1)"),
        C(
            2,
            Comm("log_ar", "all_reduce", "lossv", "world", alt_group="dp_group", twin="world_twin"),
        ),
    ]
    return Family("fsdp2", "FSDP2", FSDP_SETUP, pre, body, '[("loss", float(lossv.sum()))]')


DTENSOR_SETUP = (
    """\
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

"""
    + TP_SETUP
)


def fam_dtensor(world: int) -> Family:
    pre = [
        L(1, "torch.manual_seed(7000)"),
        L(
            1,
            "mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), "
            "torch.nn.Linear(16, 8))",
        ),
        L(1, 'mesh = DeviceMesh.from_group(tp_group, "cpu")'),
        L(1, 'parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})'),
        L(1, "opt = torch.optim.SGD(mlp.parameters(), lr=0.05)"),
        L(1, "gen = torch.Generator().manual_seed(100 + dp_rank)"),
        L(1, "loss = torch.zeros(())"),
    ]
    body = [
        L(2, "x = torch.randn(4, 8, generator=gen)"),
        C(2, Comm("tp_step", "module_step", "mlp", "tp_group")),
        L(2, "lossv = loss.detach().reshape(1)"),
        C(
            2,
            Comm("log_ar", "all_reduce", "lossv", "world", alt_group="tp_group", twin="world_twin"),
        ),
    ]
    checks = '[(f"act/dp{dp_rank}", float(y.sum())), ("loss", float(lossv.sum()))]'
    return Family("dtensor", "DTensor TP", DTENSOR_SETUP, pre, body, checks)


ACC_SETUP = """\
from accelerate import Accelerator

# accelerate reads the launcher's environment (torchrun, `accelerate launch`)
os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
os.environ.update(LOCAL_WORLD_SIZE=str(world_size))
world = dist.new_group(list(range(world_size)), timeout=timeout)
probe_gen = torch.Generator().manual_seed(500 + rank)"""


def fam_accelerate(world: int) -> Family:
    """A training loop written with accelerate: `Accelerator.prepare` (DDP underneath),
    `accelerator.backward`, a loss gathered with `accelerator.gather`, then logged."""
    pre = [
        L(1, "accelerator = Accelerator(cpu=True)"),
        L(1, "torch.manual_seed(8000)"),
        L(1, SMALL_NET),
        L(1, "opt = torch.optim.SGD(net.parameters(), lr=0.05)"),
        L(1, "model, opt = accelerator.prepare(net, opt)"),
        *local_data(),
    ]
    body = [
        L(2, "x = torch.randn(4, 8, generator=gen)"),
        C(2, Comm("acc_step", "acc_step", "", "world")),
        L(2, "lossv = loss.detach().reshape(1)"),
        C(2, Comm("acc_gather", "acc_gather", "lossv", "world", out="gathered")),
        C(2, Comm("log_ar", "all_reduce", "lossv", "world", alt_group="world", twin="world_twin")),
    ]
    checks = (
        '[("params", float(sum(p.sum() for p in net.parameters()))), ("loss", float(lossv.sum()))]'
    )
    return Family("accelerate", "accelerate (DDP)", ACC_SETUP, pre, body, checks)


LIT_SETUP = """\
import lightning as L
from torch.utils.data import DataLoader, TensorDataset

# Lightning reads the launcher's environment (torchrun) and keeps the initialized group.
os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
os.environ.update(LOCAL_WORLD_SIZE=str(world_size), NODE_RANK="0")
world = dist.new_group(list(range(world_size)), timeout=timeout)
probe_gen = torch.Generator().manual_seed(500 + rank)"""

LIT_LOOP = (
    "class Module(L.LightningModule):",
    "    def __init__(self):",
    "        super().__init__()",
    "        self.net = net",
    "        self.automatic_optimization = False",
    "",
    "    def forward(self, x):",
    "        return self.net(x)",
    "",
    "    def configure_optimizers(self):",
    "        return torch.optim.SGD(self.parameters(), lr=0.05)",
    "",
    "    def training_step(self, batch, step):",
    "        nonlocal lossv",
    "        model, opt, x = self, self.optimizers(), batch[0]",
    "        loss = torch.zeros(())",
)

LIT_AFTER = (
    "data = TensorDataset(torch.randn(4 * STEPS * world_size, 8, generator=data_gen))",
    "trainer = L.Trainer(",
    '    strategy="ddp",',
    '    accelerator="cpu",',
    "    devices=world_size,",
    "    max_epochs=1,",
    "    limit_train_batches=STEPS,",
    "    enable_progress_bar=False,",
    "    enable_model_summary=False,",
    "    logger=False,",
    "    enable_checkpointing=False,",
    ")",
    "trainer.fit(Module(), DataLoader(data, batch_size=4))",
)


def trainer_model(seed: int) -> list[Line]:
    """The small net of a trainer family, the generator of its dataset (the trainer's
    sampler gives each rank its part), and the loss the step body keeps."""
    return [
        L(1, f"torch.manual_seed({seed})"),
        L(1, SMALL_NET),
        L(1, f"data_gen = torch.Generator().manual_seed({seed + 100})"),
        L(1, "lossv = torch.zeros(1)"),
    ]


def fam_lightning(world: int) -> Family:
    """A LightningModule trained by `Trainer(strategy="ddp")`, manual optimization: the step
    (`manual_backward`, DDP's bucketed all-reduce underneath), a loss gathered with
    `self.all_gather`, logged with `sync_dist=True`, then all-reduced by hand."""
    pre = trainer_model(9000)
    body = [
        C(2, Comm("lit_step", "lit_step", "", "world")),
        L(2, "lossv = loss.detach().reshape(1)"),
        C(2, Comm("lit_gather", "lit_gather", "lossv", "world", out="gathered")),
        C(2, Comm("lit_log", "lit_log", "lossv", "world")),
        C(2, Comm("log_ar", "all_reduce", "lossv", "world", alt_group="world", twin="world_twin")),
    ]
    checks = (
        '[("params", float(sum(p.sum() for p in net.parameters()))), ("loss", float(lossv.sum()))]'
    )
    return Family(
        "lightning",
        "Lightning Trainer (DDP)",
        LIT_SETUP,
        pre,
        body,
        checks,
        loop=LIT_LOOP,
        after=LIT_AFTER,
        leave="return None",
    )


HF_SETUP = """\
import tempfile

from transformers import Trainer, TrainingArguments

# transformers (through accelerate) reads the launcher's environment and keeps the group.
os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
os.environ.update(LOCAL_WORLD_SIZE=str(world_size))
world = dist.new_group(list(range(world_size)), timeout=timeout)
probe_gen = torch.Generator().manual_seed(500 + rank)"""

HF_LOOP = (
    "class Net(torch.nn.Module):",
    "    def __init__(self):",
    "        super().__init__()",
    "        self.body = net",
    "",
    "    def forward(self, x):",
    '        return {"loss": (self.body(x) - 1.0).pow(2).mean()}',
    "",
    "class StepTrainer(Trainer):",
    "    def training_step(self, model, inputs, num_items_in_batch=None):",
    "        nonlocal lossv",
    "        step = self.state.global_step",
    "        loss = torch.zeros(())",
)

HF_AFTER = (
    'data = [{"x": torch.randn(8, generator=data_gen)} for _ in range(4 * STEPS * world_size)]',
    "args = TrainingArguments(",
    '    output_dir=os.path.join(tempfile.gettempdir(), "acc_hf_out"),',
    "    per_device_train_batch_size=4,",
    "    max_steps=STEPS,",
    "    learning_rate=0.05,",
    "    use_cpu=True,",
    "    report_to=[],",
    '    save_strategy="no",',
    '    logging_strategy="no",',
    "    disable_tqdm=True,",
    ")",
    "StepTrainer(model=Net(), args=args, train_dataset=data).train()",
)


def fam_transformers(world: int) -> Family:
    """transformers' `Trainer` (DDP through accelerate) with its `training_step` overridden:
    the step (forward, backward and DDP's all-reduce), a loss gathered with the Trainer's
    accelerator, then all-reduced by hand."""
    pre = trainer_model(9500)
    body = [
        C(2, Comm("hf_step", "hf_step", "", "world")),
        L(2, "lossv = loss.detach().reshape(1)"),
        C(2, Comm("hf_gather", "hf_gather", "lossv", "world", out="gathered")),
        C(2, Comm("log_ar", "all_reduce", "lossv", "world", alt_group="world", twin="world_twin")),
        L(2, "return loss"),
    ]
    checks = (
        '[("params", float(sum(p.sum() for p in net.parameters()))), ("loss", float(lossv.sum()))]'
    )
    return Family(
        "transformers",
        "transformers Trainer (DDP)",
        HF_SETUP,
        pre,
        body,
        checks,
        loop=HF_LOOP,
        after=HF_AFTER,
        leave="return loss",
    )


TT_SETUP = FSDP_SETUP.replace(
    "import fully_shard\n", "import fully_shard\nfrom torchtitan.distributed import utils as tt\n"
)


def fam_torchtitan(world: int) -> Family:
    """An FSDP2 loop with torchtitan's step utilities, as its trainer calls them: gradients
    clipped by `torchtitan.distributed.utils.clip_grad_norm_` (an all-reduce of the norm
    over the sharded parameters), the loss logged with its `dist_mean` and `dist_max`."""
    pre = fsdp2_model(9800)
    body = [
        L(2, "x = torch.randn(4, 8, generator=gen)"),
        C(2, Comm("tt_step", "tt_step", "", "dp_group")),
        L(2, "lossv = loss.detach().reshape(1)"),
        C(2, Comm("tt_mean", "tt_mean", "lossv", "dp_group", out="mean_loss")),
        C(2, Comm("tt_max", "tt_max", "lossv", "dp_group", out="max_loss")),
        C(
            2,
            Comm("log_ar", "all_reduce", "lossv", "world", alt_group="dp_group", twin="world_twin"),
        ),
    ]
    return Family(
        "torchtitan",
        "torchtitan utilities (FSDP2)",
        TT_SETUP,
        pre,
        body,
        '[("loss", float(lossv.sum()))]',
        reorder_pairs=[("tt_mean", "tt_max")],
    )


EXTRA_FAMILIES = ("fsdp2", "dtensor")
# Families written with a framework's API: a third stream, numbered after the others.
FRAMEWORK_FAMILIES = ("accelerate",)
# Families written with a framework's own trainer: a fourth stream, numbered after the third
# (a stream of its own, so adding it changed none of the programs labelled before).
TRAINER_FAMILIES = ("lightning", "transformers")
# Programs written with torchtitan's distributed utilities: a fifth stream, numbered last.
TITAN_FAMILIES = ("torchtitan",)


def build_family(name: str, world: int, rng: random.Random) -> Family:
    if name == "hier":
        return fam_hier(world, rng.choice(HIER_OPS))
    return {
        "mlp": fam_mlp,
        "gpt": fam_gpt,
        "encdec": fam_encdec,
        "convnet": fam_convnet,
        "ddp": fam_ddp,
        "fsdp2": fam_fsdp2,
        "dtensor": fam_dtensor,
        "accelerate": fam_accelerate,
        "lightning": fam_lightning,
        "transformers": fam_transformers,
        "torchtitan": fam_torchtitan,
    }[name](world)


# ---------------------------------------------------------------------------------------------
# Mutations


@dataclass
class Mutation:
    cls: str
    harmless: bool
    site: str
    detail: str
    helpers: list[str] = field(default_factory=list)
    twins: set[str] = field(default_factory=set)


def _ranks_of(who: str, world: int) -> list[int]:
    if who == "even":
        return list(range(0, world, 2))
    if who == "odd":
        return list(range(1, world, 2))
    return list(range(world))


def _comms(items: list) -> list[tuple[int, int, Comm]]:
    return [(i, it[0], it[1]) for i, it in enumerate(items) if isinstance(it, tuple)]


def _indent_block(lines: list[Line], by: int) -> list[Line]:
    return [Line(ln.indent + by, ln.text) for ln in lines]


def _if_else(cond: str, indent: int, then: list[Line], other: list[Line] | None) -> list[Line]:
    out = [Line(indent, f"if {cond}:"), *_indent_block(then or [Line(indent, "pass")], 1)]
    if other is not None:
        out += [Line(indent, "else:"), *_indent_block(other or [Line(indent, "pass")], 1)]
    return out


def _retyped(c: Comm, ind: int, how: str) -> list[Line]:
    """The call on a float64 or padded copy of its buffer, copied back afterwards."""
    make = (
        f"buf = {c.t}.to(torch.float64)"
        if how == "dtype"
        else f"buf = torch.cat([{c.t}.flatten(), {c.t}.new_zeros(3)])"
    )
    back = (
        f"{c.t}.copy_(buf)"
        if how == "dtype"
        else f"{c.t}.copy_(buf[: {c.t}.numel()].view_as({c.t}))"
    )
    lines = [Line(ind, p) for p in c.pre] + [Line(ind, make)]
    lines += render_comm(replace(c, pre=()), ind, t="buf")
    if c.op != "send":
        lines.append(Line(ind, back))
    return lines


def applicable(fam: Family, world: int) -> list[tuple[str, str, bool]]:
    """Every (class, site, harmless) this family supports at this world size."""
    out: list[tuple[str, str, bool]] = []
    comms = {c.site: c for _, _, c in _comms(fam.pre + fam.body)}
    for site, c in comms.items():
        coll = c.op in COLLECTIVES
        for harmless in (False, True):
            if c.in_loop:
                out.append(("early_exit", site, harmless))
                out.append(("raise_mid", site, harmless))
            out.append(("rank_cond", site, harmless))
            out.append(("data_cond", site, harmless))
            if (not harmless) or c.op == "barrier":
                out.append(("drop", site, harmless))
            if (not harmless) or (coll and c.op not in STEPS_OPS):
                out.append(("duplicate", site, harmless))
            if c.alt_group and (harmless or c.alt_group != c.g):
                out.append(("wrong_group", site, harmless))
            # The other root must be a member: a dp group has two members from W=4 on.
            if c.alt_root and (world >= 4 or c.g in ("tp_group", "local_group")):
                out.append(("wrong_root", site, harmless))
            if c.op in IN_PLACE or (c.op == "send" and not harmless):
                out.append(("dtype", site, harmless))
                out.append(("size", site, harmless))
            if c.op == "all_to_all_single":
                out.append(("splits", site, harmless))
        if c.op not in STEPS_OPS and c.in_loop:
            out.append(("main_helper", site, False))
            out.append(("main_helper", site, True))
    for a, b in fam.reorder_pairs:
        out.append(("reorder", f"{a}+{b}", False))
        out.append(("reorder", f"{a}+{b}", True))
    for a, b in fam.swap_pairs:
        out.append(("sendrecv_swap", f"{a}+{b}", False))
        out.append(("sendrecv_swap", f"{a}+{b}", True))
    return out


def mutate(fam: Family, world: int, cls: str, site: str, harmless: bool, rng: random.Random):
    """Apply one mutation; returns (pre, body, Mutation)."""
    items = {"pre": list(fam.pre), "body": list(fam.body)}
    m = Mutation(cls, harmless, site, "")
    if cls in ("reorder", "sendrecv_swap"):
        a_site, b_site = site.split("+")
        where = "body"
        idx = {c.site: (i, ind, c) for i, ind, c in _comms(items[where])}
        (ia, ind, ca), (ib, _, cb) = idx[a_site], idx[b_site]
        assert ib == ia + 1, (a_site, b_site)
        k = rng.choice(_ranks_of(ca.who, world))
        normal = render_comm(ca, 0) + render_comm(cb, 0)
        swapped = render_comm(cb, 0) + render_comm(ca, 0)
        if cls == "reorder":
            if harmless and ca.op in ("send", "recv"):
                # Reordered on every rank that runs this arm: the senders only. Their
                # receivers still expect the old order, so this is a bug after all.
                m.harmless = False
                new = _indent_block(_if_else(f"rank == {k}", 0, swapped, swapped), ind)
                m.detail = f"{b_site} before {a_site} on every sender; receivers keep the order"
            elif harmless:
                new = _indent_block(_if_else(f"rank == {k}", 0, swapped, swapped), ind)
                m.detail = f"{b_site} before {a_site} on every rank (both arms of `rank == {k}`)"
            else:
                new = _indent_block(_if_else(f"rank == {k}", 0, swapped, normal), ind)
                m.detail = f"{b_site} before {a_site} on rank {k} only"
        else:
            if harmless:
                send_c = ca if ca.op == "send" else cb
                recv_c = cb if ca.op == "send" else ca
                new = [
                    Line(0, f"req = dist.isend({send_c.t}, dst={send_c.root}, group={send_c.g})")
                ]
                new += render_comm(recv_c, 0)
                new += [Line(0, "req.wait()")]
                new = _indent_block(new, ind)
                m.detail = f"{b_site} issued as isend before {a_site}, then waited"
            else:
                new = _indent_block(_if_else(f"rank == {k}", 0, swapped, normal), ind)
                m.detail = (
                    f"{b_site} before {a_site} on rank {k}: both sides of the pair send first"
                )
        items[where][ia : ib + 1] = new
        return items["pre"], items["body"], m

    where = "pre" if any(c.site == site for _, _, c in _comms(items["pre"])) else "body"
    pos = {c.site: (i, ind, c) for i, ind, c in _comms(items[where])}
    i, ind, c = pos[site]
    callers = _ranks_of(c.who, world)
    k = rng.choice(callers)
    # The site's own computation stays outside any condition the mutation adds.
    head = [Line(0, p) for p in c.pre]
    c = replace(c, pre=())
    call = render_comm(c, 0)
    new: list[Line]
    if cls == "drop":
        if harmless:
            new = [Line(0, f"# {c.op} removed on every rank")]
            m.detail = f"{site} removed on every rank"
        else:
            new = _if_else(f"rank != {k}", 0, call, None)
            m.detail = f"{site} skipped on rank {k}"
    elif cls == "duplicate":
        if harmless:
            new = [Line(0, "for _ in range(2):"), *_indent_block(call, 1)]
            m.detail = f"{site} issued twice on every rank"
        else:
            new = call + _if_else(f"rank == {k}", 0, call, None)
            m.detail = f"{site} issued twice on rank {k}"
    elif cls == "rank_cond":
        if harmless:
            first = [Line(0, "torch.manual_seed(7 + rank)")]
            new = _if_else(f"rank == {k}", 0, first + call, call)
            m.detail = f"{site} in both arms of `if rank == {k}`"
        else:
            cond = rng.choice([f"rank == {k}", f"rank != {k}", "rank % 2 == 0"])
            if cond == "rank % 2 == 0" and c.who != "all":
                cond = f"rank == {k}"
            new = _if_else(cond, 0, call, None)
            m.detail = f"{site} only where `{cond}`"
    elif cls == "data_cond":
        draw = [Line(0, "probe = torch.rand(1, generator=probe_gen)")]
        if harmless:
            new = draw + _if_else("float(probe) >= 0.0", 0, call, None)
            m.detail = f"{site} under a data test that is true on every rank"
        else:
            new = draw + _if_else("float(probe) > 0.5", 0, call, None)
            m.detail = f"{site} under a per-rank data test (`probe > 0.5`)"
    elif cls == "wrong_group":
        if harmless:
            twin = TWIN_NAME[c.g]
            m.twins.add(c.g)
            new = render_comm(replace(c, g=twin), 0)
            m.detail = f"{site} on {twin} (same members as {c.g}) on every rank"
            if c.op in ("send", "recv"):
                # Only this side of the pair moves: its peer stays on the old group, and
                # point-to-point messages never match across groups. A bug after all.
                m.harmless = False
                m.detail = f"{site} on {twin} (same members as {c.g}); its peer stays on {c.g}"
        else:
            alt = render_comm(replace(c, g=c.alt_group), 0)
            new = _if_else(f"rank == {k}", 0, alt, call)
            m.detail = f"{site} on {c.alt_group} instead of {c.g} on rank {k}"
    elif cls == "wrong_root":
        alt = render_comm(replace(c, root=c.alt_root), 0)
        if harmless:
            new = alt
            m.detail = f"{site} rooted at `{c.alt_root}` on every rank"
        else:
            new = _if_else(f"rank == {k}", 0, alt, call)
            m.detail = f"{site} rooted at `{c.alt_root}` instead of `{c.root}` on rank {k}"
    elif cls in ("dtype", "size"):
        alt = _retyped(c, 0, cls)
        what = "float64" if cls == "dtype" else "3 extra elements"
        if harmless:
            new = alt
            m.detail = f"{site} with {what} on every rank"
        else:
            new = _if_else(f"rank == {k}", 0, alt, call)
            m.detail = f"{site} with {what} on rank {k} only"
    elif cls == "splits":
        if harmless:
            new = render_comm(c, 0, splits="uneven-all")
            m.detail = f"{site} with uneven but consistent splits on every rank"
        else:
            new = _if_else(f"rank == {k}", 0, render_comm(c, 0, splits="uneven-one"), call)
            m.detail = f"{site} sends one extra element to its first peer on rank {k}"
    elif cls == "early_exit":
        if harmless:
            brk = [Line(0, "if step == STEPS - 1:"), Line(1, "break")]
            # At the top of the step: every rank leaves after the same number of steps.
            top = next(j for j, it in enumerate(items["body"]) if _indent(it) == 2)
            items["body"][top:top] = _indent_block(brk, 2)
            m.detail = "every rank leaves the loop before the last step"
            return items["pre"], items["body"], m
        loop = "the inner loop" if ind >= 3 else "the training loop"
        new = [Line(0, f"if rank == {k} and step == 1:"), Line(1, "break"), *call]
        m.detail = f"rank {k} leaves {loop} before {site} at step 1"
    elif cls == "raise_mid":
        if harmless:
            m.helpers.append(PREFLIGHT.format(k=k))
            new = [
                Line(0, "try:"),
                Line(1, "preflight(rank, step)"),
                Line(0, "except ValueError:"),
                Line(1, "pass  # handled locally: no peer is waiting yet"),
                *call,
            ]
            m.detail = f"rank {k} raises before {site} and handles it locally"
        else:
            new = [
                Line(0, f"if rank == {k} and step == 1:"),
                Line(1, f'raise RuntimeError("rank {k}: bad batch at step 1")'),
                *call,
            ]
            m.detail = f"rank {k} raises before {site} at step 1 (after earlier communication)"
    elif cls == "main_helper":
        depth = rng.choice([1, 2])
        if harmless:
            m.helpers.append(LOCAL_HELPER)
            new = call + _if_else("is_main_process()", 0, [Line(0, "log_metrics(step)")], None)
            m.detail = f"after {site}, rank 0 calls a helper that does not communicate"
        else:
            m.helpers.append(SYNC_HELPER if depth == 1 else SYNC_HELPER2)
            new = call + _if_else(
                "is_main_process()", 0, [Line(0, "report_metrics(step, world)")], None
            )
            m.detail = (
                f"after {site}, rank 0 calls a helper that all-reduces on world"
                f" ({depth} call{'s' if depth > 1 else ''} deep)"
            )
    else:
        raise ValueError(cls)
    items[where][i : i + 1] = _indent_block(head + new, ind)
    return items["pre"], items["body"], m


def _indent(it) -> int:
    return it.indent if isinstance(it, Line) else it[0]


PREFLIGHT = """\
def preflight(rank: int, step: int) -> None:
    if rank == {k} and step == 1:
        raise ValueError("batch failed validation")"""

LOCAL_HELPER = """\
HISTORY: list[int] = []


def log_metrics(step: int) -> None:
    HISTORY.append(step)"""

SYNC_HELPER = """\
def report_metrics(step: int, group) -> None:
    total = torch.tensor([float(step)])
    dist.all_reduce(total, group=group)"""

SYNC_HELPER2 = """\
def _mean_over(value: float, group) -> float:
    total = torch.tensor([value])
    dist.all_reduce(total, group=group)
    return float(total) / dist.get_world_size(group)


def report_metrics(step: int, group) -> None:
    _mean_over(float(step), group)"""


# ---------------------------------------------------------------------------------------------
# Rendering a program


def render_program(pid: str, fam: Family, world: int, pre, body, m: Mutation | None) -> str:
    desc = m.detail if m else "none (the unmutated program)"
    kind = "none" if m is None else ("harmless" if m.harmless else "bug")
    out = [
        f'"""commlint accuracy benchmark program {pid}.',
        "",
        f"family: {fam.name} ({fam.parallel}), world size {world}",
        f"mutation: {m.cls if m else 'none'} ({kind}): {desc}",
        "",
        f"Run: torchrun --nproc-per-node {world} {pid}.py",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "import os",
        "from datetime import timedelta",
        "",
        "import torch",
        "import torch.distributed as dist",
        "",
        'TIMEOUT = float(os.environ.get("ACC_TIMEOUT", "10"))',
        "STEPS = 3",
        "TP = 2",
        "",
        "",
        "def is_main_process() -> bool:",
        "    return dist.get_rank() == 0",
        "",
    ]
    for h in m.helpers if m else []:
        out += ["", h, ""]
    out += ["", "def main(rank: int, world_size: int) -> list[tuple[str, float]]:"]
    out.append("    timeout = timedelta(seconds=TIMEOUT)")
    setup = fam.setup
    for g in sorted(m.twins) if m else []:
        setup += "\n" + TWIN_SETUP[g]
    out += ["    " + s if s else "" for s in setup.splitlines()]

    def emit(items):
        for it in items:
            if isinstance(it, Line):
                out.append("    " * it.indent + it.text)
            else:
                for ln in render_comm(it[1], it[0]):
                    out.append("    " * ln.indent + ln.text)

    emit(pre)
    out += ["    " + s if s else "" for s in fam.loop]
    # The body sits one indent deeper when the loop is a method of a class in `main`.
    deeper = len(fam.loop) > 1
    body = [
        Line(it.indent + deeper, fam.leave if it.text == "break" else it.text)
        if isinstance(it, Line)
        else (it[0] + deeper, it[1])
        for it in body
    ]
    emit(body)
    out += ["    " + s if s else "" for s in fam.after]
    out.append(f"    return {fam.checks}")
    out += [
        "",
        "",
        'if __name__ == "__main__":',
        '    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))',
        "    print(main(dist.get_rank(), dist.get_world_size()), flush=True)",
        "    dist.destroy_process_group()",
        "",
    ]
    return "\n".join(out)


def generate(
    count: int, seed: int, families: tuple[str, ...] = FAMILIES, start: int = 0
) -> list[dict]:
    """`count` programs numbered from `start`; the families take turns."""
    rng = random.Random(seed)
    records = []
    for n in range(start, start + count):
        world = rng.choices(WORLD_SIZES, WORLD_WEIGHTS)[0]
        family = families[n % len(families)]
        if family == "hier" and world == 2:
            world = 4
        fam = build_family(family, world, rng)
        pid = f"{family}_w{world}_{n:04d}"
        roll = rng.random()
        m = None
        pre, body = fam.pre, fam.body
        if roll >= 0.08:
            choices = applicable(fam, world)
            want_harmless = roll < 0.08 + 0.28
            pool = [c for c in choices if c[2] == want_harmless] or choices
            # Even out the classes: pick a class first, then a site of that class.
            classes = sorted({c[0] for c in pool})
            cls = rng.choice(classes)
            cls_, site, harmless = rng.choice([c for c in pool if c[0] == cls])
            pre, body, m = mutate(fam, world, cls_, site, harmless, rng)
        text = render_program(pid, fam, world, pre, body, m)
        records.append(
            {
                "id": pid,
                "path": f"programs/{pid}.py",
                "family": fam.name,
                "parallel": fam.parallel,
                "world_size": world,
                "mutation": m.cls if m else "none",
                "site": m.site if m else None,
                "intent": "none" if m is None else ("harmless" if m.harmless else "bug"),
                "detail": m.detail if m else "unmutated",
                "_text": text,
            }
        )
    return records


RUFF_TOML = """\
# Generated programs: written for the benchmark, not by hand. Mutations leave variables
# unused and loops with unused counters on purpose.
extend = "../../../pyproject.toml"

[lint]
extend-ignore = ["F841", "B007", "B905", "E501", "SIM105", "SIM108", "SIM114"]
"""


def write(records: list[dict]) -> None:
    """Write programs (formatted with ruff) and the manifest; touch only files that change,
    so a labelling run in progress never sees a program missing or half written."""
    PROGRAMS.mkdir(parents=True, exist_ok=True)
    # Staged next to programs/, so the relative `extend` of ruff.toml resolves the same way.
    with tempfile.TemporaryDirectory(dir=HERE, prefix=".staging_") as tmp:
        staged = Path(tmp)
        (staged / "ruff.toml").write_text(RUFF_TOML, encoding="utf-8")
        for r in records:
            (staged / Path(r["path"]).name).write_text(r.pop("_text"), encoding="utf-8")
        # Generated code is held to the same style as the rest of the tree.
        subprocess.run(
            [sys.executable, "-m", "ruff", "format", "-q", "--no-cache", str(staged)], check=True
        )
        wanted = set()
        for f in [*sorted(staged.glob("*.py")), staged / "ruff.toml"]:
            wanted.add(f.name)
            dest = PROGRAMS / f.name
            text = f.read_text(encoding="utf-8")
            if not dest.exists() or dest.read_text(encoding="utf-8") != text:
                part = dest.with_suffix(".part")
                part.write_text(text, encoding="utf-8")
                part.replace(dest)
    for old in PROGRAMS.glob("*.py"):
        if old.name not in wanted:
            old.unlink()
    MANIFEST.write_text(json.dumps({"programs": records}, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=600)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--extra", type=int, default=80, help="FSDP2 / DTensor programs, numbered after the rest"
    )
    p.add_argument(
        "--frameworks",
        type=int,
        default=40,
        help="programs written with accelerate, numbered after the extra ones",
    )
    p.add_argument(
        "--trainers",
        type=int,
        default=40,
        help="programs trained by Lightning's and transformers' Trainer, numbered next",
    )
    p.add_argument(
        "--torchtitan",
        type=int,
        default=20,
        help="programs written with torchtitan's distributed utilities, numbered last",
    )
    args = p.parse_args(argv)
    # The library front ends come as a second stream, so adding them never changes the others.
    records = generate(args.count, args.seed)
    records += generate(args.extra, args.seed + 1, EXTRA_FAMILIES, start=args.count)
    start = args.count + args.extra
    records += generate(args.frameworks, args.seed + 2, FRAMEWORK_FAMILIES, start=start)
    start += args.frameworks
    records += generate(args.trainers, args.seed + 3, TRAINER_FAMILIES, start=start)
    start += args.trainers
    records += generate(args.torchtitan, args.seed + 4, TITAN_FAMILIES, start=start)
    write(records)
    from collections import Counter

    print(f"{len(records)} programs in {PROGRAMS.relative_to(Path.cwd())}")
    print(" by family:", dict(Counter(r["family"] for r in records)))
    print(" by world size:", dict(sorted(Counter(r["world_size"] for r in records).items())))
    print(" by intent:", dict(Counter(r["intent"] for r in records)))
    print(" by mutation:", dict(sorted(Counter(r["mutation"] for r in records).items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
