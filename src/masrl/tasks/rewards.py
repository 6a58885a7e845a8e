"""Reward components of a response, unweighted; the trainer weights and sums them.

- `correct`: 1.0 if the task finds an answer in the response and it scores
  correct (base.grade), else 0.0.
- `format`: how well the response keeps to the `<answer>...</answer>` output
  format, as a separate term so a run can pay for format early and fade it out
  (the shaping of DeepSeek-R1, arXiv:2501.12948, section 2.2.2):

  1.0  exactly one opening and one closing tag, in that order, with non-empty
       content, and nothing but whitespace after the closing tag;
  0.5  some `<answer>...</answer>` pair exists, but one of those fails
       (empty content, text after it, more than one tag);
  0.0  no complete pair.
"""

from __future__ import annotations

import re

from masrl.tasks.base import Task, grade
from masrl.types import TaskItem


def format_reward(text: str, tag: str = "answer") -> float:
    opening, closing = f"<{tag}>", f"</{tag}>"
    if not re.search(re.escape(opening) + r".*?" + re.escape(closing), text, re.DOTALL):
        return 0.0
    if text.count(opening) != 1 or text.count(closing) != 1:
        return 0.5
    content, after = text.split(opening)[1].split(closing)
    return 1.0 if content.strip() and not after.strip() else 0.5


def reward_terms(task: Task, item: TaskItem, text: str) -> dict[str, float]:
    return {"correct": 1.0 if grade(task, item, text).correct else 0.0, "format": format_reward(text)}
