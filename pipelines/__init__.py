"""Model and pipeline definitions that tasks, flows and DAGs run."""
