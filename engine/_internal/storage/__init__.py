"""The one place that talks to storage: filesystems and paths (``paths``), the
``Storage`` object (``filesystem``), atomic directory commits (``commit``), retries of
remote storage (``retry``), what boto3 does that pyarrow's S3 cannot (``s3``), the
reachability check before training (``check``) and text safe to show (``uris``).

``uris`` is here although it is standard library only: it is about storage addresses
(credentials and query parameters stripped), and this ``__init__`` imports nothing, so
the lowest layers (``engine.config``) can import it without pulling in pyarrow.
"""
