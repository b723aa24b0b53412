"""torch layers whose parameters the per-rank evaluator knows (`perrank_layers.py`)."""

from __future__ import annotations

from commlint.lint.perrank_layers import Layer, attribute, build_layer, forward
from commlint.lint.perrank_model import UNK, Tensor


def _parameters(layer: Layer) -> list:
    return attribute(layer, "parameters").fn(None, [], {}, None)


def test_sequential_lists_parameters_in_torch_order():
    relu = build_layer("torch.nn.ReLU", [], {})
    model = build_layer(
        "torch.nn.Sequential",
        [
            build_layer("torch.nn.Linear", [10, 20], {}),
            relu,
            build_layer("torch.nn.Linear", [20, 7], {"bias": False}),
        ],
        {},
    )
    assert [p.shape for p in _parameters(model)] == [(20, 10), (20,), (7, 20)]
    named = attribute(model, "named_parameters").fn(None, [], {}, None)
    assert [n for n, _ in named] == ["0.weight", "0.bias", "2.weight"]
    assert forward(model, [Tensor((5, 10))]).shape == (5, 7)


def test_keyword_sizes_are_read():
    layer = build_layer("torch.nn.Linear", [], {"in_features": 3, "out_features": 4})
    assert [p.shape for p in _parameters(layer)] == [(4, 3), (4,)]


def test_a_size_the_rank_does_not_know_leaves_the_layer_unknown():
    assert build_layer("torch.nn.Linear", [UNK, 4], {}) is None
    assert build_layer("torch.nn.Linear", [3, 4], {"bias": UNK}) is None
    assert build_layer("torch.nn.Conv2d", [3, 4, 3], {}) is None
    # one unknown layer: the container knows none of its parameters
    assert (
        build_layer("torch.nn.Sequential", [build_layer("torch.nn.ReLU", [], {}), UNK], {}) is None
    )
