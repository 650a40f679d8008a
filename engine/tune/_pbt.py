"""PBT's exploit, the part that touches storage: a private copy of the donor's checkpoint
that the receiving trial adopts (``TrialDecision(RESTART, checkpoint=...)``)."""

from __future__ import annotations

import logging
import os
import shutil
from typing import Optional, Tuple

from engine import constants
from engine.checkpoint import Checkpoint
from engine.tune.schedulers import Exploit

logger = logging.getLogger("engine")

PBT_POLICY_FILE = "pbt_policy.json"  # in the trial directory: every exploit, in order


def copy_donor_checkpoint(exploit: Exploit, trial_name: str
                          ) -> Optional[Tuple[Checkpoint, Checkpoint]]:
    """A local copy of the donor's checkpoint without its commit marker (the receiving
    run commits it as its own), owned by the caller, and the checkpoint copied. The
    checkpoint chosen at the decision is copied, or when the donor's retention dropped
    it meanwhile (the donor reported on before the receiver's next report), the donor's
    latest one. Only a committed checkpoint is copied: one whose deletion began before
    the copy listed its files has lost its commit marker, and is skipped. None when
    neither could be copied: the trial then goes on unchanged."""
    sources = [exploit.checkpoint]
    latest = getattr(exploit.donor, "checkpoint", None)
    if latest is not None and latest is not exploit.checkpoint:
        sources.append(latest)
    error: Optional[Exception] = None
    for source in sources:
        local = None
        try:
            local = source.to_directory()
            marker = os.path.join(local, constants.COMMIT_MARKER)
            if not os.path.exists(marker):
                # Retention deletes a checkpoint's commit marker first: a copy without
                # it was taken while the donor deleted that checkpoint (files missing).
                raise FileNotFoundError(f"{source.path} is no longer committed (the "
                                        "donor's retention is deleting it)")
            os.remove(marker)
        except Exception as exc:  # noqa: BLE001 - any failure to copy means "no exploit"
            error = exc
            if local is not None:
                shutil.rmtree(local, ignore_errors=True)
            continue
        ckpt = Checkpoint(local, owns_directory=True)
        ckpt.metrics = dict(source.metrics or {})
        return ckpt, source
    logger.warning("PBT: could not copy %s's checkpoint (%s); %s goes on unchanged.",
                   exploit.donor.trial_name, error, trial_name)
    return None
