"""The data sets: their facts and one-time preparation (prepare), loading and batching (datasets)."""
