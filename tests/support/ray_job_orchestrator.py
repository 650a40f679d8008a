"""An orchestrator's task process for the ``ray_job`` tests (run as a script).

    python tests/support/ray_job_orchestrator.py <out.json> <storage> <run name> <epochs> [step ...]

It ingests and splits the digits here (no Ray; ``$TY_PIPELINE``, ``$TY_SOURCE``,
``$TY_LABEL`` and ``$TY_CONFIG`` (JSON) name another pipeline; ``$TY_SCALING`` (JSON)
the scaling), then calls ``tasks.train`` (and
``evaluate``, ``batch_predict`` when named) in the mode ``$TRAINYARD_EXECUTION`` says,
and writes the references, and whether this process imported torch or started Ray, to
``out.json``.
"""

from __future__ import annotations

import json
import logging
import os
import sys


def main(out: str, storage: str, run_name: str, epochs: str, *steps: str) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(name)s %(levelname)s %(message)s")
    from tasks import steps as core

    pipeline = os.environ.get("TY_PIPELINE", "digits")  # another: TY_SOURCE, TY_LABEL
    data = core.ingest(os.environ.get("TY_SOURCE", "sklearn:digits"), storage=storage)
    splits = core.split(data, 0.2, 0, os.environ.get("TY_LABEL", "target"))
    config = {"epochs": int(epochs), "epoch_delay_s": float(os.environ.get("EPOCH_DELAY",
                                                                             "0")),
              "seed": 0}
    if os.environ.get("TY_CONFIG"):
        config = json.loads(os.environ["TY_CONFIG"])
    scaling = json.loads(os.environ.get("TY_SCALING") or '{"num_workers": 1}')
    ckpt = core.train(pipeline, splits, scaling,
                      {"name": run_name, "storage": storage, "config": config,
                       "max_failures": 0})
    result = {"checkpoint": ckpt.to_dict(), "checkpoint_type": type(ckpt).__name__}
    if "evaluate" in steps:
        result["metrics"] = core.evaluate(ckpt, splits["validation"])
    if "batch_predict" in steps:
        preds = core.batch_predict(ckpt, splits["validation"])
        result["predictions"] = preds.to_dict()
        result["predictions_type"] = type(preds).__name__
    import ray

    result.update(torch_imported="torch" in sys.modules, ray_initialized=ray.is_initialized())
    with open(out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main(*sys.argv[1:])
