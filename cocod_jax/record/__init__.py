"""What a run leaves on disk and where it came from: the workdir and its lock (workdir.py),
checkpoints and exact resume (checkpoints.py), the schema of results.json and metrics.jsonl
(schema.py), files written whole or not at all (files.py), the commit and the machine
(provenance.py)."""
