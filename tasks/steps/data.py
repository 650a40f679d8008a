"""Pipeline steps, independent of any orchestrator: references in, references out.

    data = ingest("sklearn:digits", storage="/data/ty")
    splits = split(data, test_size=0.2, seed=0, stratify_column="target")
    ckpt = train("digits", splits, {"num_workers": 2},
                 {"name": run_name_for(run_id, "train"), "storage": "/data/ty"})
    metrics = evaluate(ckpt, splits["validation"])
    promote(ckpt, metrics, alias="production", gate={"accuracy": ">=0.9"})
    preds = batch_predict(resolve_alias("digits", storage="/data/ty"), data)

Every function takes and returns JSON-able values and the references of ``tasks.refs``
(dicts of them are accepted too), so the Prefect and Airflow adapters only wrap them.
Steps are idempotent for a retry: ingest and split reuse a committed copy of the same
content, ``train`` and ``tune`` resume the run named in ``run`` from its latest committed
checkpoint, ``batch_predict`` replaces its output, ``promote`` writes a new history entry.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any, Dict, List, Mapping, Optional, Union

from engine.exceptions import ConfigError, TrainyardError
from engine.runtime import ensure_ray
from engine.storage import Storage, default_root, join, redact
from tasks import _datasets, _jobs, _predict, _registry, _store, _training
from tasks.refs import CheckpointRef, DatasetRef, Promotion, TuneRef

logger = logging.getLogger("tasks")

_MAX_RUN_NAME = 120

DatasetLike = Union[DatasetRef, Dict[str, Any]]
CheckpointLike = Union[CheckpointRef, Dict[str, Any]]


class TaskError(TrainyardError):
    """A step could not produce its output (e.g. every tuning trial failed)."""


# --- names ------------------------------------------------------------------------------
def run_name_for(run_id: str, task_name: str, prefix: Optional[str] = None) -> str:
    """The engine run name of a task in an orchestrator run: the same for every retry of
    that task in that run, so a retried ``train`` resumes instead of starting over.

    Args:
        run_id: The orchestrator's run id (Prefect flow run id, Airflow ``run_id``).
        task_name: The task's name in the flow/DAG (``train``).
        prefix: Optional namespace, e.g. the DAG id (Airflow run ids repeat across DAGs).

    Returns:
        ``[prefix-]task_name-run_id`` with characters other than letters, digits, ``.``,
        ``_`` and ``-`` replaced; long names are shortened with a hash suffix.
    """
    if not run_id or not task_name:
        raise ConfigError("run_name_for(run_id, task_name) needs both, e.g. "
                          "run_name_for(flow_run.id, 'train').")
    parts = [p for p in (prefix, task_name, str(run_id)) if p]
    name = _store.clean_name("-".join(parts), "run name")
    if len(name) > _MAX_RUN_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        name = f"{name[:_MAX_RUN_NAME - 13]}-{digest}"
    return name


# --- data -------------------------------------------------------------------------------
def ingest(source: Optional[str] = None, format: Optional[str] = None, *,
           storage: Optional[str] = None, name: Optional[str] = None,
           partition_filter: Optional[Dict[str, Any]] = None,
           window: Optional[Dict[str, Any]] = None, since: Any = None, until: Any = None,
           incremental: bool = False, sql: Optional[str] = None,
           connection: Optional[str] = None, key: Optional[str] = None,
           readers: Optional[int] = None) -> DatasetRef:
    """Materialise a source as Parquet under ``<storage>/datasets/``.

    Args:
        source: A built-in data set (``sklearn:digits``, ``digits``, ``breast_cancer``,
            ``wine``, ``diabetes``, ``iris``); an absolute path / URI (``s3://``) of a
            Parquet, CSV or newline-delimited JSON file or directory, or of a
            Hive-partitioned Parquet directory (``events/date=2026-11-25/…``); or a
            SQLAlchemy database URL with a table, ``postgresql://user@host/db?table=t``.
        format: ``parquet``, ``csv`` or ``json``; default: from the file suffix.
        storage: Pipeline storage root; default ``$TRAINYARD_STORAGE_PATH`` or
            ``~/trainyard_results``.
        name: Data set name (default: the built-in's, the file's or the table's name).
        partition_filter: Partitioned sources: ``{key: value or [values]}``.
        window: Partitioned sources: ``{"column": "date", "last": "30d"}`` (or
            ``"since"``/``"until"``): the partitions with ``since <= value < until``.
        since, until: The window's bounds (dates, datetimes or ISO strings); ``until``
            defaults to now; the shipped flow and DAG pass their logical date.
        incremental: Partitioned sources: read only partitions whose files changed since
            they were last ingested; nothing changed: the previous data set, unread.
        sql: A query to ingest (with ``connection``).
        connection: The database URL for ``sql`` (credentials: see ``tasks._sql``).
        key: SQL: the integer column to shard the parallel read by and to order rows by
            (default: the table's primary key; none: ``LIMIT/OFFSET`` shards).
        readers: SQL: parallel reads (Ray tasks); default 2.

    Returns:
        A :class:`DatasetRef` with row count, schema and content fingerprint. The same
        content ingested again returns the committed copy.
    """
    from tasks import _sources

    routed = _sources.ingest_from(source, format, storage=storage, name=name, options=dict(
        partition_filter=partition_filter, window=window, since=since, until=until,
        incremental=incremental, sql=sql, connection=connection, key=key, readers=readers))
    if routed is not None:
        return routed
    src = _datasets.open_source(source, format)
    name = _store.clean_name(name or src.name, "data set name")
    st = Storage.from_path(_store.sub(default_root(storage), _store.DATASETS_DIR))
    parent = st.root
    staging = _datasets.staging_dir(st, parent)
    sink = _datasets.ParquetSink(st, staging, src.schema)
    try:
        for batch in src.batches():
            sink.write(batch)
        num_rows, fp = sink.close()
    except BaseException:
        st.delete_dir(staging)
        raise
    final = join(parent, f"{name}-{fp[:12]}")
    ref = DatasetRef(uri=st.display(final), format="parquet", num_rows=num_rows,
                     schema=_datasets.schema_dict(src.schema), fingerprint=fp, name=name,
                     metadata=dict(src.metadata))
    ref = _datasets.commit(st, staging, final, ref)
    logger.info("Ingested %s: %d rows → %s", src.metadata.get("source"), num_rows, ref.uri)
    return ref


def split(dataset: DatasetLike, test_size: float = 0.2, seed: int = 0,
          stratify_column: Optional[str] = None) -> Dict[str, DatasetRef]:
    """Split a data set into ``train`` and ``validation``, deterministically for a seed.

    Args:
        dataset: What :func:`ingest` returned.
        test_size: Fraction of rows in ``validation`` (0 < test_size < 1).
        seed: The same seed gives the same split.
        stratify_column: Keep this column's class proportions in both parts.

    Returns:
        ``{"train": DatasetRef, "validation": DatasetRef}``, written next to the input.
    """
    ref = DatasetRef.from_dict(dataset)
    if isinstance(test_size, bool) or not isinstance(test_size, (int, float)) \
            or not 0 < test_size < 1:
        raise ConfigError(f"split(test_size={test_size!r}): use a fraction between 0 and 1, "
                          "e.g. 0.2.")
    if stratify_column is not None and stratify_column not in ref.schema:
        raise ConfigError(f"split(stratify_column={stratify_column!r}): the data set has no "
                          f"such column (it has {ref.columns}). If that is a pipeline's "
                          "label column, the data does not fit the pipeline: give it a "
                          "source with that column, or fix the PipelineSpec's label_column.")
    st = Storage.from_path(ref.uri)
    inner = st.root
    tag = f"-by-{_store.clean_name(stratify_column)}" if stratify_column else ""
    out_dir = f"{inner.rstrip('/')}-split-s{int(seed)}-t{test_size:g}{tag}"
    outputs = {k: join(out_dir, k) for k in ("train", "validation")}
    done = {k: _datasets.load_manifest(st, p) for k, p in outputs.items()}
    if all(d is not None and d.metadata.get("parent") == ref.fingerprint
           for d in done.values()):
        return done  # type: ignore[return-value]
    for key, found in done.items():
        if found is not None and found.metadata.get("parent") != ref.fingerprint:
            st.delete_dir(outputs[key])  # split from other content under the same name
    mask = _datasets.split_mask(ref, test_size, int(seed), stratify_column)
    params = dict(seed=int(seed), test_size=test_size, stratify_column=stratify_column)
    return _datasets.write_split(st, ref, mask, outputs, params)


# --- training ---------------------------------------------------------------------------
def train(pipeline: str, datasets: Mapping[str, DatasetLike],
          scaling: Optional[Mapping[str, Any]] = None,
          run: Optional[Mapping[str, Any]] = None) -> CheckpointRef:
    """Train a pipeline's model and return its latest committed checkpoint.

    Args:
        pipeline: A registered pipeline name (``pipelines.list_pipelines()``).
        datasets: ``{"train": DatasetRef, "validation": DatasetRef}`` (split's output).
        scaling: ``{"num_workers": 2, "use_gpu": False, "resources_per_worker": ...}``.
        run: ``{"name", "storage", "config", "max_failures", "num_to_keep", "verbose",
            "execution", "runtime_env"}`` (see ``tasks._training.RunSettings``). The same
            ``name`` resumes that run from its latest committed checkpoint; a finished run
            is returned as it is. ``execution="ray_job"`` runs the step as a Ray job.

    Raises:
        TrainingFailedError: training failed and the engine's retries are spent.
    """
    from pipelines import get_pipeline

    job = _jobs.plan("train", dict(pipeline=pipeline, datasets=datasets, scaling=scaling,
                                   run=run))
    if job is not None:
        return job.run()
    ensure_ray(background=True)  # Ray starts while the pipeline's framework imports
    spec = get_pipeline(pipeline)
    settings = _training.RunSettings.parse(run)
    refs = _training.train_datasets(datasets)
    config = {**spec.defaults, **settings.config}
    trainer = _training.build_trainer(spec, refs, config, scaling,
                                      settings.run_config(spec))
    result = trainer.fit()
    _plot_learning_curve(result, spec)
    return _training.checkpoint_ref(spec, result, config, refs, settings.storage)


def _plot_learning_curve(result: Any, spec: Any) -> None:
    metrics = [m for m in (spec.metric, "loss") if m in result.metrics]
    try:
        result.plot(metrics=metrics or None)
    except ImportError:
        logger.warning("No learning curve: matplotlib is missing (pip install "
                       "'trainyard[tracking]').")
    except ValueError as exc:  # nothing numeric reported
        logger.warning("No learning curve for %s: %s", result.path, exc)


def tune(pipeline: str, datasets: Mapping[str, DatasetLike],
         param_space: Optional[Mapping[str, Any]] = None,
         tune_config: Optional[Mapping[str, Any]] = None, *,
         scaling: Optional[Mapping[str, Any]] = None,
         run: Optional[Mapping[str, Any]] = None) -> TuneRef:
    """Search a pipeline's hyperparameters; return the best checkpoint and every trial.

    Args:
        pipeline, datasets, scaling: As for :func:`train` (``scaling`` is per trial).
        param_space: The search in JSON form, e.g. ``{"lr": {"loguniform": [1e-3, 1e-2]},
            "hidden": {"grid_search": [32, 64]}}``; default: the pipeline's.
        tune_config: ``num_samples`` (default 1), ``metric``/``mode`` (default the
            pipeline's), ``scheduler`` (``"fifo"`` or ``"asha"`` with ``max_t``,
            ``grace_period``, ``reduction_factor``), ``max_concurrent_trials``, ``seed``,
            ``time_budget_s``.
        run: As for :func:`train`; ``config`` holds the fixed hyperparameters of every
            trial (e.g. fewer epochs than the final training). The same ``name`` resumes
            the experiment (finished trials are kept).

    Raises:
        TaskError: every trial failed (the message has the first error).
    """
    job = _jobs.plan("tune", dict(pipeline=pipeline, datasets=datasets,
                                  param_space=param_space, tune_config=tune_config,
                                  scaling=scaling, run=run))
    if job is not None:
        return job.run()
    ensure_ray(background=True)  # Ray starts while the pipeline's framework imports
    from engine.tune import Tuner
    from pipelines import get_pipeline

    spec = get_pipeline(pipeline)
    settings = _training.RunSettings.parse(run)
    refs = _training.train_datasets(datasets)
    tc = _training.tune_config(spec, tune_config)
    config = {**spec.defaults, **settings.config}
    space = _training.parse_param_space(spec.param_space if param_space is None
                                        else param_space)
    rc = settings.run_config(spec, settings.name or f"{spec.name}-tune-{int(time.time())}")
    trainer = _training.build_trainer(spec, refs, config, scaling, rc)
    grid = Tuner(trainer, param_space=spec.tune_space(space), tune_config=tc,
                 run_config=rc).fit()
    if grid.num_errors == len(grid):
        raise TaskError(f"Every one of the {len(grid)} trials failed; the first: "
                        f"{grid.errors[0] if grid.errors else 'no trials ran'}")
    best = _training.best_result(grid, tc.metric, tc.mode)
    best_config = _training.json_safe({**config, **spec.config_of(best)})
    return TuneRef(best=_training.checkpoint_ref(spec, best, best_config, refs,
                                                  settings.storage),
                   best_config=best_config, metric=tc.metric, mode=tc.mode,
                   trials=_training.trial_rows(grid, tc.metric, spec.config_of),
                   experiment_uri=grid.experiment_path)


# --- prediction -------------------------------------------------------------------------
def evaluate(checkpoint: CheckpointLike, dataset: DatasetLike, *,
             output_dir: Optional[str] = None, num_workers: int = 1,
             execution: Optional[str] = None,
             runtime_env: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Score a labelled data set with a checkpoint (``engine.predict.evaluate``).

    Args:
        checkpoint: What :func:`train` returned (its pipeline loads the model).
        dataset: A labelled data set (the validation split).
        output_dir: Where ``confusion_matrix.png`` and ``metrics.json`` go; default
            ``<run>/evaluations/<checkpoint>-<data fingerprint>/``.
        num_workers: Scoring actors for large data sets.
        execution, runtime_env: ``ray_job`` runs the step as a Ray job (as ``run`` of
            :func:`train` says); default ``$TRAINYARD_EXECUTION`` or ``local``.

    Returns:
        The metrics (classification: ``accuracy``, ``precision``, ``recall``, ``f1``,
        ``roc_auc``, ``log_loss``, ``confusion_matrix``, ``confusion_matrix_path``;
        regression: ``rmse``, ``mae``, ``r2``) plus ``checkpoint_uri``,
        ``dataset_fingerprint`` and ``metrics_uri``, all JSON values.
    """
    job = _jobs.plan("evaluate", dict(checkpoint=checkpoint, dataset=dataset,
                                      output_dir=output_dir, num_workers=num_workers,
                                      execution=execution, runtime_env=runtime_env))
    if job is not None:
        return job.run()
    from engine.predict import evaluate as engine_evaluate

    ckpt, spec = _predict.load_checkpoint(checkpoint)
    ref = DatasetRef.from_dict(dataset)
    out = output_dir or _evaluation_dir(ckpt, ref.fingerprint)
    # Small data is scored in this process; above the limit a pool of Ray actors scores
    # the files (BatchPredictor) and only labels and predictions come back here.
    small = ref.num_rows * max(len(ref.schema), 1) <= _training.IN_PROCESS_MAX_CELLS
    data = _datasets.read_pandas(ref) if small else ref.uri
    report = engine_evaluate(_predict.engine_checkpoint(ckpt), data, output_dir=out,
                             task=spec.task, num_workers=num_workers,
                             **spec.predictor_kwargs(ckpt.config))
    report = _training.json_safe(report)
    report.update(checkpoint_uri=ckpt.uri, dataset_fingerprint=ref.fingerprint,
                  metrics_uri=redact(_store.sub(out, "metrics.json")))
    st = Storage.from_path(_store.sub(out, "metrics.json"))
    st.write_json_atomic(st.root, report)
    return report


def _evaluation_dir(ckpt: CheckpointRef, fingerprint: str) -> str:
    """Where :func:`evaluate` keeps a checkpoint's metrics on one data set by default:
    ``<run>/evaluations/<checkpoint>-<data fingerprint>/``."""
    return _store.sub(_predict.checkpoint_run_uri(ckpt), "evaluations",
                      f"{ckpt.uri.rstrip('/').rsplit('/', 1)[-1]}-{fingerprint[:12]}")


def batch_predict(checkpoint: CheckpointLike, dataset: DatasetLike,
                  output: Optional[str] = None, *, num_workers: int = 1,
                  batch_size: Optional[int] = None,
                  keep_columns: Optional[List[str]] = None,
                  in_process: Optional[bool] = None, execution: Optional[str] = None,
                  runtime_env: Optional[Dict[str, Any]] = None) -> DatasetRef:
    """Score a data set and write the predictions as Parquet.

    Args:
        checkpoint: The model (e.g. ``resolve_alias(pipeline)``).
        dataset: The rows to score (a label column, if present, is kept).
        output: Directory (local or URI) for the predictions; its old content is
            replaced. Default ``<storage>/predictions/<run>-<checkpoint>/<data fp>/``.
        num_workers: Scoring actors, each loading the model once.
        batch_size: Rows per model call.
        keep_columns: Input columns copied beside the predictions; default every
            column that is not a model input (ids, labels).
        in_process: Score in this process (True) or with a pool of ``num_workers`` Ray
            actors reading the files (False, ``engine.predict.BatchPredictor``). Default:
            in this process up to ``IN_PROCESS_MAX_CELLS`` cells, where starting the
            pool would cost more than scoring. Both write the same columns and types.
        execution, runtime_env: ``ray_job`` runs the step as a Ray job (as ``run`` of
            :func:`train` says); default ``$TRAINYARD_EXECUTION`` or ``local``.

    Returns:
        A :class:`DatasetRef` of the predictions: the kept columns, ``predictions`` and,
        for classifiers, ``predicted_label``; rows in input order.
    """
    job = _jobs.plan("batch_predict", dict(
        checkpoint=checkpoint, dataset=dataset, output=output, num_workers=num_workers,
        batch_size=batch_size, keep_columns=keep_columns, in_process=in_process,
        execution=execution, runtime_env=runtime_env))
    if job is not None:
        return job.run()
    from engine import constants
    from engine.predict import BatchPredictor

    ckpt, spec = _predict.load_checkpoint(checkpoint)
    ref = DatasetRef.from_dict(dataset)
    engine_ckpt = _predict.engine_checkpoint(ckpt)
    features = (engine_ckpt.get_model_card() or {}).get("feature_columns") or []
    keep = list(keep_columns) if keep_columns is not None else [
        c for c in ref.schema if c not in features]
    out = output or _store.sub(
        default_root(ckpt.storage), _store.PREDICTIONS_DIR,
        f"{ckpt.run_name or spec.name}-{ckpt.uri.rstrip('/').rsplit('/', 1)[-1]}",
        ref.fingerprint[:12])
    st = Storage.from_path(out)
    inner = st.root
    kwargs = spec.predictor_kwargs(ckpt.config)
    label = spec.task == "classification"
    if in_process is None:
        in_process = ref.num_rows * max(len(ref.schema), 1) <= _training.IN_PROCESS_MAX_CELLS
    if in_process:
        _predict.score_in_process(engine_ckpt, _datasets.read_pandas(ref), keep, kwargs,
                                  label, st, inner)
    else:
        scored = BatchPredictor(engine_ckpt, **kwargs).predict(
            ref.uri, num_workers=num_workers, keep_columns=keep,
            batch_size=batch_size or constants.DEFAULT_PREDICT_BATCH_SIZE)
        if label:
            scored = scored.map_batches(_predict.add_predicted_label, batch_format="numpy")
        _predict.write_predictions(scored, st, inner)
    return _predict.describe(st, inner, name=f"{ref.name or 'data'}-predictions",
                             metadata={"checkpoint_uri": ckpt.uri, "input": ref.fingerprint,
                                       "pipeline": spec.name})


# --- aliases ----------------------------------------------------------------------------
def promote(checkpoint: CheckpointLike, metrics: Mapping[str, Any],
            alias: str = "production", gate: Optional[Mapping[str, Any]] = None, *,
            registry: Optional[str] = None, dataset: Optional[DatasetLike] = None,
            run_id: Optional[str] = None) -> Promotion:
    """Point ``alias`` at ``checkpoint`` if its metrics pass ``gate``.

    Args:
        checkpoint: The candidate (what :func:`train` returned).
        metrics: What :func:`evaluate` returned for it.
        alias: ``production``, ``staging`` … (lower-case letters, digits, ``_``, ``-``).
        gate: ``{"accuracy": [">=0.9", ">=champion"], "log_loss": "<=champion-0.01"}``;
            every condition must hold. ``champion`` is the model the alias points at
            now, evaluated on ``dataset`` (cached per checkpoint and data fingerprint);
            with no champion yet, its conditions pass. None: the pipeline's default
            gate; ``{}``: no gate.
        registry: Where aliases live: a path/URI for pointer files, or
            ``mlflow:<tracking URI>`` for an MLflow model registry; default
            ``$TRAINYARD_REGISTRY``, else ``<checkpoint's storage>/models``.
        dataset: The validation data ``metrics`` were computed on; needed by a champion
            condition unless the champion was evaluated on it before.
        run_id: The orchestrator's run id, recorded with the decision.

    Returns:
        A :class:`Promotion`. A failed gate leaves the alias as it was; every decision
        is kept in the alias's history, with the champion's metrics beside the
        candidate's.

    Raises:
        ConfigError: a malformed gate (before anything is evaluated), a gate metric that
            ``metrics`` lacks, metrics of another checkpoint or data set, or a champion
            condition with no ``dataset`` to evaluate the champion on.
        RegistryError: the registry could not be reached; the alias did not move, and
            a retry promotes once.
    """
    from pipelines import get_pipeline

    ckpt = CheckpointRef.from_dict(checkpoint)
    _registry.check_alias(alias)
    metrics = _checked_metrics(ckpt, metrics, dataset)
    if gate is None and ckpt.pipeline:
        gate = get_pipeline(ckpt.pipeline).gate
    gate = dict(gate or {})
    conditions = _registry.parse_gate(gate)
    reg = _registry.open_registry(registry, ckpt.storage)
    pipeline = ckpt.pipeline or ckpt.framework
    previous = reg.current(pipeline, alias)
    champion = None
    if previous is not None and _registry.has_champion_condition(conditions):
        champion = _champion_metrics(previous, metrics, dataset)
    context = {"engine_run": ckpt.run_name, "run_id": run_id,
               "data_fingerprint": metrics.get("dataset_fingerprint")}
    decision = _registry.decide(ckpt, metrics, alias, gate, reg, previous, champion,
                                context)
    logger.info("%s %s as %s/%s: %s", "Promoted" if decision.promoted else "Did not promote",
                ckpt.uri, decision.pipeline, alias, "; ".join(decision.reasons) or "no gate")
    return decision


def _checked_metrics(ckpt: CheckpointRef, metrics: Any,
                     dataset: Optional[DatasetLike]) -> Dict[str, Any]:
    """``metrics`` as a dict, once they are known to be ``ckpt``'s on ``dataset``."""
    if not isinstance(metrics, Mapping):
        raise ConfigError("promote(metrics=...) takes the dict that evaluate() returned.")
    evaluated = metrics.get("checkpoint_uri")
    if evaluated is not None and evaluated != ckpt.uri:
        raise ConfigError(f"These metrics are of checkpoint {evaluated!r}, not of "
                          f"{ckpt.uri!r}: evaluate the checkpoint you promote.")
    fingerprint = metrics.get("dataset_fingerprint")
    if dataset is not None and fingerprint is not None \
            and DatasetRef.from_dict(dataset).fingerprint != fingerprint:
        raise ConfigError("promote(dataset=...) is not the data these metrics were computed "
                          "on: pass the data set you evaluated the candidate on.")
    return dict(metrics)


def _champion_metrics(champion: CheckpointRef, metrics: Dict[str, Any],
                      dataset: Optional[DatasetLike]) -> Dict[str, Any]:
    """The champion's metrics on the candidate's data: from an earlier evaluation of the
    same checkpoint on the same data if there is one, else evaluated now (and kept)."""
    fingerprint = metrics.get("dataset_fingerprint") or (
        DatasetRef.from_dict(dataset).fingerprint if dataset is not None else None)
    if fingerprint:
        st = Storage.from_path(_store.sub(_evaluation_dir(champion, fingerprint),
                                          "metrics.json"))
        cached = st.read_json(st.root)
        if cached and cached.get("checkpoint_uri") == champion.uri \
                and cached.get("dataset_fingerprint") == fingerprint:
            return cached
    if dataset is None:
        raise ConfigError(f"The gate compares against the champion ({champion.uri}), which "
                          "has not been evaluated on this data: pass promote(dataset=...) "
                          "— the validation data the candidate was evaluated on.")
    logger.info("Evaluating the champion %s on the candidate's data.", champion.uri)
    return evaluate(champion, dataset)


def resolve_alias(pipeline: str, alias: str = "production", *,
                  storage: Optional[str] = None,
                  registry: Optional[str] = None) -> Optional[CheckpointRef]:
    """The checkpoint ``alias`` points at for ``pipeline``, or None if it was never set.

    Args:
        registry: Where aliases live (as for :func:`promote`); default
            ``$TRAINYARD_REGISTRY``, else ``<storage>/models``.
    """
    _registry.check_alias(alias)
    return _registry.open_registry(registry, storage).current(pipeline, alias)


def promoted_checkpoint(pipeline: str, uri: str, alias: str = "production", *,
                        storage: Optional[str] = None,
                        registry: Optional[str] = None) -> CheckpointRef:
    """The checkpoint at ``uri`` that ``alias`` was once promoted to (e.g. the one a
    ``trainyard.model.promoted`` event names), even if the alias has moved on since.

    Raises:
        ConfigError: ``uri`` was never promoted as ``alias`` of ``pipeline`` there.
    """
    current = resolve_alias(pipeline, alias, storage=storage, registry=registry)
    if current is not None and current.uri == uri:
        return current
    for entry in reversed(alias_history(pipeline, alias, storage=storage,
                                        registry=registry)):
        ckpt = entry.get("checkpoint") or {}
        if entry.get("decision") == "promoted" and ckpt.get("uri") == uri:
            return CheckpointRef.from_dict(ckpt)
    raise ConfigError(f"{uri!r} was never promoted as {pipeline}/{alias} in this registry: "
                      "pass the storage (or registry) the retraining promoted in.")


def alias_history(pipeline: str, alias: str = "production", *,
                  storage: Optional[str] = None,
                  registry: Optional[str] = None) -> List[Dict[str, Any]]:
    """Every promotion decision for ``alias``, oldest first."""
    _registry.check_alias(alias)
    return _registry.open_registry(registry, storage).history(pipeline, alias)


__all__ = ["ingest", "split", "train", "tune", "evaluate", "batch_predict", "promote",
           "resolve_alias", "promoted_checkpoint", "alias_history", "run_name_for", "TaskError"]
