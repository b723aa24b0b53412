"""Activation statistics of the monitored layers, aggregated over pipeline stages and written
by global rank 0."""
import json

import torch.distributed as dist


class LayerMonitor:
    def __init__(self, layer_ids, watch, out_path=None):
        self.watched = [i for i in layer_ids if i in watch]
        self.stats = {}
        self.out_path = out_path

    def record(self, layer_id, act):
        if layer_id in self.watched:
            self.stats[f"layer_{layer_id}"] = float(act.abs().mean())

    def gather_and_aggregate(self):
        # every stage joins the gather, even one that monitors nothing
        parts = [None] * dist.get_world_size()
        dist.all_gather_object(parts, self.stats)
        merged = {}
        for p in parts:
            merged.update(p or {})
        if dist.get_rank() == 0 and self.out_path:
            with open(self.out_path, "a") as f:
                f.write(json.dumps(merged) + "\n")
        self.stats = {}
        return merged
