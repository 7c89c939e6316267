"""How a run is described and checked: the entry points' flags (flags.py), the one error type for
user mistakes and the exit statuses (errors.py), config files and dotted overrides (files.py,
args.py) and every user-facing value checked before anything starts (validation.py)."""
