"""How a run is described and checked: the entry points' flags (flags.py), the one error type for
user mistakes and the exit statuses (errors.py), the run's schema and defaults (defaults.py),
config files and dotted overrides (loader.py, args.py) and every user-facing value checked before
anything starts (validation.py)."""
