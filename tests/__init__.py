"""The test suite; a package so that pytest puts the repository root on the path for
`from tests import reference` (pytest's own rootdir handling, not a sys.path edit of ours)."""
