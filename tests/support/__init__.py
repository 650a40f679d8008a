"""What the tests share: servers on loopback (Prefect, PostgreSQL, S3, a Ray head with its
job server), the Airflow harness, script runners, fakes and probes. Not tests themselves:
pytest collects none of these modules."""
