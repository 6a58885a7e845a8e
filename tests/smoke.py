"""Overrides shared by the 2-step smoke runs of shipped configs on the tiny random model."""

from __future__ import annotations


def tiny_run(batch_size: int = 2, eval_size: int = 3) -> tuple[str, ...]:
    """Two steps of `batch_size` tasks, a checkpoint after each, short replies, `eval_size` eval items."""
    return (
        "model.name=tiny",
        "model.lora_rank=4",
        "model.lora_alpha=8",
        "trainer.steps=2",
        f"trainer.batch_size={batch_size}",
        "trainer.checkpoint_every=1",
        "rollout.max_new_tokens=6",
        "eval.max_new_tokens=6",
        f"eval.size={eval_size}",
    )
