"""A team's own churn models, as trainyard pipelines (``own_pipeline.churn``)."""
