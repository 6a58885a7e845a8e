"""A three-role debate written as an ordinary `openai` program, for bench/program_vs_team.py.

Two debaters answer the question, each then sees the other's answer and may revise, and a judge
reads both final answers and gives the answer: 5 calls a run, the last on its own. It knows
nothing of masrl; the model names `debater_a`, `debater_b` and `judge` are routed by the config's
`system.trained`. Deterministic given its model replies (no randomness of its own).
"""

from __future__ import annotations

import json
import sys

ANSWER = "Compute the result. Reply with the final answer as <answer>NUMBER</answer> and nothing else."
REVISE = "Another solver answered: {other}\nCheck both answers and reply with <answer>NUMBER</answer>."
JUDGE = "Two solvers answered a problem. Reply with the correct final answer as <answer>NUMBER</answer>."


def ask(client, model: str, messages: list[dict]) -> str:
    reply = client.chat.completions.create(model=model, messages=messages)
    return reply.choices[0].message.content or ""


def main() -> None:
    from openai import OpenAI

    task = json.loads(sys.stdin.readline())
    client = OpenAI(max_retries=0)
    q = task["question"]
    first = [{"role": "system", "content": ANSWER}, {"role": "user", "content": q}]
    a = ask(client, "debater_a", first)
    b = ask(client, "debater_b", first)
    a2 = ask(client, "debater_a", [*first, {"role": "assistant", "content": a},
                                   {"role": "user", "content": REVISE.format(other=b)}])
    b2 = ask(client, "debater_b", [*first, {"role": "assistant", "content": b},
                                   {"role": "user", "content": REVISE.format(other=a)}])
    verdict = ask(client, "judge", [{"role": "system", "content": JUDGE},
                                    {"role": "user", "content": f"Problem: {q}\nA: {a2}\nB: {b2}"}])
    print(json.dumps({"answer": verdict}))


if __name__ == "__main__":
    main()
