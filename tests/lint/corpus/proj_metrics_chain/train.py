"""Training script: metrics are reduced two calls deep, under is_main_process()."""

from dist_utils import is_main_process, summarize


def log_epoch(epoch, metrics, writer):
    if is_main_process():
        summary = summarize(metrics)  # expect: CL101
        for k, v in summary.items():
            writer.add_scalar(k, v, epoch)
