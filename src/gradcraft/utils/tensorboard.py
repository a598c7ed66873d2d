"""torch.utils.tensorboard.SummaryWriter: TensorBoard event files written with the `tensorboard`
package's own event writer (pip install tensorboard), so TensorBoard reads them as PyTorch's.

    writer = SummaryWriter("runs/exp1")
    writer.add_scalar("loss/train", loss.item(), step)
    writer.add_scalars("loss", {"train": 0.5, "val": 0.7}, step)   # one run folder per curve
    writer.add_histogram("weights", model.fc.weight, step)
    writer.close()

Like PyTorch's, importing this module without tensorboard installed raises ImportError.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime

import numpy as np

try:
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog
    from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary, SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
except ImportError:
    raise ImportError("TensorBoard logging requires the tensorboard package (pip install tensorboard)") from None


def _number(value) -> float:
    if hasattr(value, "item"):
        return float(value.item())
    return float(value)


def _array(values) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach()
    return np.asarray(values.numpy() if hasattr(values, "numpy") else values, dtype=np.float64).reshape(-1)


def _default_bins() -> list:
    """TensorFlow's histogram buckets: +-1e-12 growing by 10% up to 1e20, and 0."""
    v, buckets = 1e-12, []
    while v < 1e20:
        buckets.append(v)
        v *= 1.1
    return [-b for b in reversed(buckets)] + [0] + buckets


def _histogram(values: np.ndarray, bins, max_bins=None) -> HistogramProto:
    """The histogram proto of values (PyTorch's make_histogram: empty bins at either end dropped)."""
    if values.size == 0:
        raise ValueError("The input has no element.")
    counts, limits = np.histogram(values, bins=bins)
    if max_bins is not None and len(counts) > max_bins:
        subsampling = len(counts) // max_bins
        remainder = len(counts) % subsampling
        if remainder:
            counts = np.pad(counts, [[0, subsampling - remainder]])
        counts = counts.reshape(-1, subsampling).sum(axis=-1)
        new_limits = np.empty((counts.size + 1,), limits.dtype)
        new_limits[:-1], new_limits[-1] = limits[:-1:subsampling], limits[-1]
        limits = new_limits
    cum_counts = np.cumsum(np.greater(counts, 0))
    start, end = np.searchsorted(cum_counts, [0, cum_counts[-1] - 1], side="right")
    start, end = int(start), int(end) + 1
    counts = counts[start - 1 : end] if start > 0 else np.concatenate([[0], counts[:end]])
    limits = limits[start : end + 1]
    return HistogramProto(
        min=values.min(),
        max=values.max(),
        num=len(values),
        sum=values.sum(),
        sum_squares=values.dot(values),
        bucket_limit=limits.tolist(),
        bucket=counts.tolist(),
    )


class SummaryWriter:
    def __init__(
        self,
        log_dir: str | None = None,
        comment: str = "",
        purge_step: int | None = None,
        max_queue: int = 10,
        flush_secs: int = 120,
        filename_suffix: str = "",
    ) -> None:
        if not log_dir:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", stamp + "_" + socket.gethostname() + comment)
        self.log_dir = str(log_dir)
        self.purge_step = purge_step
        self.max_queue, self.flush_secs, self.filename_suffix = max_queue, flush_secs, filename_suffix
        self._writer = EventFileWriter(self.log_dir, max_queue, flush_secs, filename_suffix)
        self._scalar_writers: dict = {}
        self.default_bins = _default_bins()
        if purge_step is not None:  # (TensorBoard drops the events at or after purge_step it has read)
            self._writer.add_event(Event(step=purge_step, file_version="brain.Event:2"))
            self._writer.add_event(Event(step=purge_step, session_log=SessionLog(status=SessionLog.START)))

    def get_logdir(self) -> str:
        return self.log_dir

    def _add(self, summary: Summary, global_step, walltime, writer=None) -> None:
        event = Event(summary=summary, wall_time=time.time() if walltime is None else walltime)
        if global_step is not None:
            event.step = int(global_step)
        (writer or self._writer).add_event(event)

    def add_scalar(
        self, tag: str, scalar_value, global_step=None, walltime=None, new_style: bool = False, double_precision=False
    ) -> None:
        value = _number(scalar_value)
        if new_style:
            dtype = "DT_DOUBLE" if double_precision else "DT_FLOAT"
            field = "double_val" if double_precision else "float_val"
            tensor = TensorProto(dtype=dtype, tensor_shape=TensorShapeProto(), **{field: [value]})
            metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
            summary = Summary(value=[Summary.Value(tag=tag, tensor=tensor, metadata=metadata)])
        else:
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=value)])
        self._add(summary, global_step, walltime)

    def add_scalars(self, main_tag: str, tag_scalar_dict: dict, global_step=None, walltime=None) -> None:
        """Each curve in its own run folder, log_dir/<main_tag>_<tag>, under the tag main_tag (as PyTorch)."""
        walltime = time.time() if walltime is None else walltime
        for tag, value in tag_scalar_dict.items():
            folder = self.log_dir + "/" + main_tag.replace("/", "_") + "_" + tag
            writer = self._scalar_writers.get(folder)
            if writer is None:
                writer = EventFileWriter(folder, self.max_queue, self.flush_secs, self.filename_suffix)
                self._scalar_writers[folder] = writer
            summary = Summary(value=[Summary.Value(tag=main_tag, simple_value=_number(value))])
            self._add(summary, global_step, walltime, writer)

    def add_histogram(self, tag: str, values, global_step=None, bins="tensorflow", walltime=None, max_bins=None):
        if isinstance(bins, str) and bins == "tensorflow":
            bins = self.default_bins
        histogram = _histogram(_array(values), bins, max_bins)
        self._add(Summary(value=[Summary.Value(tag=tag, histo=histogram)]), global_step, walltime)

    def add_text(self, tag: str, text_string: str, global_step=None, walltime=None) -> None:
        metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text", content=b""))
        tensor = TensorProto(
            dtype="DT_STRING",
            string_val=[text_string.encode("utf8")],
            tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]),
        )
        summary = Summary(value=[Summary.Value(tag=tag + "/text_summary", metadata=metadata, tensor=tensor)])
        self._add(summary, global_step, walltime)

    def add_hparams(self, hparam_dict, metric_dict, hparam_domain_discrete=None, run_name=None, global_step=None):
        raise NotImplementedError("SummaryWriter.add_hparams is not supported by gradcraft; log them with add_text")

    def add_graph(self, model, input_to_model=None, verbose=False, use_strict_trace=True):
        raise NotImplementedError("SummaryWriter.add_graph is not supported by gradcraft (it traces PyTorch's graph)")

    def flush(self) -> None:
        self._writer.flush()
        for writer in self._scalar_writers.values():
            writer.flush()

    def close(self) -> None:
        self._writer.close()
        for writer in self._scalar_writers.values():
            writer.close()
        self._scalar_writers = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["SummaryWriter"]
