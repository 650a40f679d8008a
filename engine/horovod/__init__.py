"""Horovod: ``HorovodTrainer`` and ``HorovodConfig`` (Gloo controller, CPU or GPU).

Importing this package imports neither horovod nor torch. ``HorovodTrainer(...)`` raises
``ImportError`` with the install command when horovod is missing: Horovod 0.28.1 must
be built from its sdist with a C++17 fix, which ``scripts/install_horovod.sh`` does.
"""

from __future__ import annotations

from engine.horovod.config import HorovodConfig
from engine.horovod.trainer import HorovodTrainer

__all__ = ["HorovodTrainer", "HorovodConfig"]
