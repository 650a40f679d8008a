"""Reading TensorBoard event files back (TFRecord framing + tensorboardX's protos), so
tests check what TensorBoard would show without needing tensorboard installed."""

from __future__ import annotations

import os
import struct
from typing import Dict, List, Tuple


def read_events(log_dir: str) -> list:
    """Every Event in the ``events.out.tfevents.*`` files of ``log_dir``, in file order."""
    from tensorboardX.proto import event_pb2

    events = []
    names = sorted(n for n in os.listdir(log_dir) if n.startswith("events.out.tfevents"))
    for name in names:
        with open(os.path.join(log_dir, name), "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            pos += 12  # length, then its masked CRC
            events.append(event_pb2.Event.FromString(data[pos:pos + length]))
            pos += length + 4  # payload, then its masked CRC
    return events


def scalars(events: list) -> Dict[str, List[Tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` of the scalar summaries."""
    out: Dict[str, List[Tuple[int, float]]] = {}
    for event in events:
        for value in event.summary.value:
            if value.HasField("simple_value"):
                out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out


def hparams(events: list) -> Dict[str, object]:
    """The hyperparameters of the session-start hparams summary ({} when none)."""
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData

    for event in events:
        for value in event.summary.value:
            if value.tag == "_hparams_/session_start_info":
                data = HParamsPluginData.FromString(value.metadata.plugin_data.content)
                out = {}
                for key, v in data.session_start_info.hparams.items():
                    kind = v.WhichOneof("kind")
                    out[key] = getattr(v, kind)
                return out
    return {}
