"""RLlib: ``RLTrainer`` runs an RLlib algorithm (PPO, DQN, …) as an engine run, and
``load_algorithm`` rebuilds the trained algorithm from its checkpoint.

Importing this package does not import RLlib; ``fit()`` and ``load_algorithm`` do
(``pip install 'trainyard[rllib]'``).
"""

from __future__ import annotations

from engine.rllib.checkpoint import load_algorithm
from engine.rllib.trainer import RLTrainer

__all__ = ["RLTrainer", "load_algorithm"]
