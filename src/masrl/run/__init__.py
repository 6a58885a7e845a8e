"""A run directory and what acts on it.

`files.RunDir` names every file a run writes and reads them back; `log` writes the
metrics, TensorBoard and episode trees; `prepare` makes a new run's directory or
finds where a stopped one continues; `resume` checkpoints and restores an engine's
state; `trained` loads a trained run for `masrl eval` and `masrl serve`; `stop` ends
a run on a signal, its time allowance or a failed rank, keeping what it trained.
"""
