"""The same ``transformers.Trainer`` on 2 processes: trainyard's TransformersTrainer vs
``torchrun --nproc_per_node=2``, gloo on CPU.

Both sides build the Trainer with :func:`trainer_init` — a tiny BERT (2 layers, hidden
64) classifying the generated sentences of ``tests/support/hf_fixtures.py`` with a tokenizer
trained on them, evaluation, logging and a checkpoint every epoch — and hand it the same
torch datasets, which the Trainer shards across the 2 ranks. The in-loop time is rank 0's
``Trainer.train()`` call (:class:`timed trainer <_timed_trainer_class>`), so it includes
the Trainer's evaluation and saving, and on our side the reports and checkpoint uploads.

* ours: a fresh ``python -m bench.transformers --child ours ...`` process (Ray started
  by the engine's embedded default), like a user's script.
* anchor: ``python -m torch.distributed.run --nproc_per_node=2 -m bench.transformers
  --child anchor ...`` (run as a module: a script named transformers.py would shadow the
  library).

Both processes are started through ``bench._child``.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any, Dict, Optional

from bench._child import (child_env, child_main, loop_summary, read_json, run_child,
                          write_json)
from bench.core import Context, Metric, Target, Workload, register

NPROC = 2
N_TRAIN, N_VAL, BATCH = 2000, 400, 32


def _epochs(quick: bool) -> int:
    return 2 if quick else 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the Trainer both sides run ----------------------------------------------------------
_TIMED: Dict[str, type] = {}


def _timed_trainer_class() -> type:
    """A ``transformers.Trainer`` whose ``train()`` writes rank 0's wall and CPU time."""
    if "cls" not in _TIMED:
        import transformers

        class TimedTrainer(transformers.Trainer):
            timing_out: Optional[str] = None

            def train(self, *args: Any, **kwargs: Any) -> Any:
                cpu0, t0 = time.process_time(), time.perf_counter()
                thread0 = time.thread_time()
                start_unix = time.time()
                out = super().train(*args, **kwargs)
                if self.args.process_index == 0 and self.timing_out:
                    logs = [h for h in self.state.log_history if "eval_accuracy" in h]
                    write_json(self.timing_out, {
                        "in_loop_s": time.perf_counter() - t0,
                        "loop_cpu_s": time.process_time() - cpu0,
                        # The training thread alone: the loop's own work, whatever the
                        # machine's load (ours: the actor's other threads excluded).
                        "loop_thread_cpu_s": time.thread_time() - thread0,
                        "loop_start_unix": start_unix, "loop_end_unix": time.time(),
                        "global_step": self.state.global_step,
                        "world_size": self.args.world_size,
                        "eval_accuracy": logs[-1]["eval_accuracy"] if logs else None,
                        "train_loss": out.training_loss, "pid": os.getpid()})
                return out

        _TIMED["cls"] = TimedTrainer
    return _TIMED["cls"]


def datasets(tokenizer_dir: str) -> Dict[str, Any]:
    """The torch datasets both sides train and evaluate on."""
    import transformers

    from tests.support import hf_fixtures

    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    splits = hf_fixtures.make_splits(N_TRAIN, N_VAL)
    return {"train": hf_fixtures.torch_dataset(tokenizer, *splits["train"]),
            "evaluation": hf_fixtures.torch_dataset(tokenizer, *splits["validation"])}


def trainer_init(train_dataset: Any, eval_dataset: Any, **config: Any) -> Any:
    import transformers

    from tests.support import hf_fixtures

    tokenizer = transformers.AutoTokenizer.from_pretrained(config["tokenizer_dir"])
    args = transformers.TrainingArguments(
        output_dir=config["output_dir"], num_train_epochs=config["epochs"],
        learning_rate=2e-3, per_device_train_batch_size=BATCH, per_device_eval_batch_size=128,
        eval_strategy="epoch", save_strategy="epoch", logging_strategy="epoch",
        report_to="none", disable_tqdm=True, seed=0, use_cpu=True)
    trainer = _timed_trainer_class()(
        model=hf_fixtures.tiny_bert(len(tokenizer)), args=args, train_dataset=train_dataset,
        eval_dataset=eval_dataset, processing_class=tokenizer,
        data_collator=transformers.DataCollatorWithPadding(tokenizer),
        compute_metrics=hf_fixtures.accuracy_metric)
    trainer.timing_out = config["timing_out"]
    return trainer


def _config(ctx: Context, tokenizer_dir: str) -> Dict[str, Any]:
    return {"tokenizer_dir": tokenizer_dir, "epochs": _epochs(ctx.quick),
            "timing_out": str(ctx.workdir / "loop.json"),
            "output_dir": str(ctx.workdir / "hf_output")}


def _tokenizer_dir(ctx: Context) -> str:
    from tests.support import hf_fixtures

    path = ctx.workdir / "tokenizer"
    hf_fixtures.train_tokenizer(hf_fixtures.make_splits(N_TRAIN, N_VAL)["train"][0]) \
        .save_pretrained(str(path))
    return str(path)


# --- the two sides ---------------------------------------------------------------------
def run_ours(ctx: Context) -> Dict[str, Any]:
    config = _config(ctx, _tokenizer_dir(ctx))
    wall, _ = run_child(ctx, "bench.transformers", "ours",
                        {"config": config, "storage": str(ctx.workdir / "runs")},
                        env=child_env(HF_HUB_OFFLINE="1"), log_name="trainyard")
    return _result(ctx, wall, config)


def run_anchor(ctx: Context) -> Dict[str, Any]:
    config = _config(ctx, _tokenizer_dir(ctx))
    launcher = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={NPROC}",
                "--master_addr=127.0.0.1", f"--master_port={_free_port()}"]
    wall, _ = run_child(ctx, "bench.transformers", "anchor", {"config": config},
                        env=child_env(HF_HUB_OFFLINE="1"), log_name="torchrun",
                        launcher=launcher)
    return _result(ctx, wall, config)


def _result(ctx: Context, wall: float, config: Dict[str, Any]) -> Dict[str, Any]:
    loop = read_json(config["timing_out"])
    if loop["world_size"] != NPROC:
        raise RuntimeError(f"the Trainer ran on {loop['world_size']} process(es), not {NPROC}")
    return {"whole_wall_s": wall, **loop_summary(ctx, loop, (
        "in_loop_s", "loop_cpu_s", "loop_thread_cpu_s", "global_step", "eval_accuracy",
        "train_loss"))}


def ours_process(config: Dict[str, Any], storage: str) -> None:
    """trainyard's whole process: what a user's ``python train.py`` does."""
    from engine import RunConfig, ScalingConfig
    from engine.huggingface import TransformersTrainer

    result = TransformersTrainer(
        trainer_init, trainer_init_config=config, datasets=datasets(config["tokenizer_dir"]),
        scaling_config=ScalingConfig(num_workers=NPROC),
        run_config=RunConfig(storage_path=storage, verbose=0)).fit()
    assert result.metrics["epoch"] == config["epochs"], result.metrics


def anchor_main(config: Dict[str, Any]) -> None:
    """One process of ``torchrun --nproc_per_node=2``: the Trainer sets up DDP itself."""
    data = datasets(config["tokenizer_dir"])
    trainer_init(data["train"], data["evaluation"], **config).train()


register(Workload(
    name="transformers",
    description=f"transformers.Trainer, tiny BERT (2 layers, hidden 64), {N_TRAIN} "
                f"sentences, batch {BATCH}, eval + checkpoint every epoch, 2 procs, gloo",
    anchor="the same Trainer under python -m torch.distributed.run --nproc_per_node=2",
    run_ours=run_ours,
    run_anchor=run_anchor,
    metrics=[
        Metric("in_loop_s", "s", Target("ratio_max", 1.1),
               "rank 0: Trainer.train() from start to return"),
        Metric("whole_wall_s", "s", None,
               "whole process, start to exit (ours includes Ray start and shutdown)"),
    ],
    ray_mode="none",
    sizes=lambda quick: {"epochs": _epochs(quick), "train_rows": N_TRAIN, "eval_rows": N_VAL,
                         "batch_size": BATCH, "model": "BERT 2x64", "nproc": NPROC,
                         "backend": "gloo"},
    rep_timeout_s=600.0,
    notes=["Both sides give the Trainer the same torch datasets and let it shard them; "
           "ours additionally reports every epoch and uploads each checkpoint to the "
           "run's storage inside the timed loop."],
))


if __name__ == "__main__":
    child_main({"ours": ours_process, "anchor": anchor_main})
