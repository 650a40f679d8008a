"""PBT's exploit, the part that touches storage: a private copy of the donor's checkpoint
that the receiving trial adopts (``TrialDecision(RESTART, checkpoint=...)``)."""

from __future__ import annotations

import logging
import os
from typing import Optional

from engine import constants
from engine.checkpoint import Checkpoint
from engine.tune.schedulers import Exploit

logger = logging.getLogger("engine")

PBT_POLICY_FILE = "pbt_policy.json"  # in the trial directory: every exploit, in order


def copy_donor_checkpoint(exploit: Exploit, trial_name: str) -> Optional[Checkpoint]:
    """A local copy of the donor's checkpoint without its commit marker (the receiving
    run commits it as its own), owned by the caller; None when the donor's retention
    dropped it meanwhile (the trial then goes on unchanged)."""
    source = exploit.checkpoint
    try:
        local = source.to_directory()
        marker = os.path.join(local, constants.COMMIT_MARKER)
        if os.path.exists(marker):
            os.remove(marker)
    except Exception as exc:  # noqa: BLE001 - any failure to copy means "no exploit"
        logger.warning("PBT: could not copy %s's checkpoint (%s); %s goes on unchanged.",
                       exploit.donor.trial_name, exc, trial_name)
        return None
    ckpt = Checkpoint(local, owns_directory=True)
    ckpt.metrics = dict(source.metrics or {})
    return ckpt
