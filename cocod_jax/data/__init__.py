"""The datasets and each worker's shard of them (pipeline.py)."""
