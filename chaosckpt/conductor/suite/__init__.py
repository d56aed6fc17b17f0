"""Suites: every configured scenario against one job, planned, run in parallel workers, resumable."""
