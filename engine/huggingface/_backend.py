"""The torch process group of the Hugging Face trainers, plus the environment that
``transformers`` and ``accelerate`` read in each worker.

No transformers or accelerate import here: the driver side stays light, and the worker
side imports accelerate only when a config asks for FSDP on CPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Dict, Iterator, Optional

from engine import constants
from engine.torch.config import TorchBackend, TorchConfig

if TYPE_CHECKING:
    from engine._internal.worker_group.group import WorkerGroup

# Driver settings that workers must see to behave like the driver: offline mode and
# where the Hugging Face caches live. Tokens are not forwarded (set them on the nodes).
FORWARDED_ENV_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE",
                      "HF_HOME", "HF_HUB_CACHE", "HF_ASSETS_CACHE", "HF_ENDPOINT")


@dataclass
class HuggingFaceTorchConfig(TorchConfig):
    """A :class:`TorchConfig` plus the environment the workers get before training.

    Its workers can serve another fit or trial (``engine.reuse_workers()``, a Tuner):
    the worker reset destroys the process group, resets Accelerate's process-wide state
    (its ``PartialState`` singleton) and restores the environment set here.

    Args:
        worker_env: Set in every worker process once its process group is up, before
            ``train_func`` (and the modules it was defined in) are loaded there.
        files: ``{env var: file content}``: each content is written to a file local to
            the worker and the variable set to its path (e.g. a DeepSpeed JSON config
            that only exists on the driver).
        fsdp_on_cpu: Make Accelerate shard with FSDP over gloo on CPU workers.
    """

    worker_env: Dict[str, str] = field(default_factory=dict)
    files: Dict[str, str] = field(default_factory=dict)
    fsdp_on_cpu: bool = False

    REUSABLE_WORKERS: ClassVar[bool] = True  # worker_group.reset undoes its set-up

    @classmethod
    def from_torch_config(cls, config: Optional[TorchConfig], **extra: object
                          ) -> "HuggingFaceTorchConfig":
        """The user's TorchConfig settings (backend, init_method, timeout_s) plus ``extra``."""
        base = {f.name: getattr(config, f.name) for f in dataclasses.fields(TorchConfig)} \
            if config is not None else {}
        return cls(**base, **extra)

    @property
    def backend_cls(self) -> type:
        return HuggingFaceBackend


class HuggingFaceBackend(TorchBackend):
    """TorchBackend, then the Hugging Face environment on every worker."""

    def on_start(self, worker_group: "WorkerGroup", backend_config: HuggingFaceTorchConfig
                 ) -> None:
        super().on_start(worker_group, backend_config)
        worker_group.execute(_prepare_worker, dict(backend_config.worker_env),
                             dict(backend_config.files), backend_config.fsdp_on_cpu)


def forwarded_env() -> Dict[str, str]:
    """The driver's Hugging Face offline/cache settings, for the workers."""
    return {k: os.environ[k] for k in FORWARDED_ENV_VARS if k in os.environ}


def _prepare_worker(env: Dict[str, str], files: Dict[str, str], fsdp_on_cpu: bool) -> None:
    """Runs in each worker process (a reused one gets its start-up environment back)."""
    os.environ.update(env)
    if files:
        folder = tempfile.mkdtemp(prefix="trainyard_hf_")
        for i, (var, content) in enumerate(sorted(files.items())):
            path = os.path.join(folder, f"{i}_{var.lower()}.json")
            with open(path, "w") as f:
                f.write(content)
            os.environ[var] = path
    if fsdp_on_cpu:
        from engine.huggingface._accelerate_env import enable_fsdp_on_cpu

        enable_fsdp_on_cpu()


@contextlib.contextmanager
def scratch_cwd(run_name: str) -> Iterator[str]:
    """Run in ``$TMPDIR/trainyard/<run name>`` (shared by the ranks of a node), so that
    relative paths such as the default ``TrainingArguments.output_dir`` do not land in
    whatever directory the Ray worker happened to start in."""
    base = (constants.get(constants.HF_SCRATCH_DIR_ENV_VAR)
            or os.path.join(tempfile.gettempdir(), "trainyard"))
    path = os.path.join(base, run_name or "run")
    os.makedirs(path, exist_ok=True)
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield path
    finally:
        os.chdir(previous)
