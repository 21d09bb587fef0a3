"""The `mneme` command line: a click group assembled from entry points."""
