"""``ray.tune.utils.mock_trainable.MyTrainableClass``: the stand-in trainable Ray's Tune
examples use, whose reward follows ``height * tanh(t / width)``."""

from __future__ import annotations

import json
import math
import os
from typing import Any, Dict

from engine.tune.trainable import Trainable


class MyTrainableClass(Trainable):
    """Reports ``episode_reward_mean = height * tanh(timestep / width)`` each step (the
    config's ``width`` and ``height``, 1 by default); checkpoints its timestep as a
    JSON file."""

    def setup(self, config: Dict[str, Any]) -> None:
        self.timestep = 0

    def step(self) -> Dict[str, Any]:
        self.timestep += 1
        width = float(self.config.get("width", 1))
        return {"episode_reward_mean":
                math.tanh(self.timestep / width) * self.config.get("height", 1)}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        with open(os.path.join(checkpoint_dir, "checkpoint"), "w") as f:
            json.dump({"timestep": self.timestep}, f)

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        with open(os.path.join(checkpoint_dir, "checkpoint")) as f:
            self.timestep = json.load(f)["timestep"]


__all__ = ["MyTrainableClass"]
