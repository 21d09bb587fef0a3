"""Autotuning of recorded kernels (search spaces, Optuna studies, worker pools)."""
