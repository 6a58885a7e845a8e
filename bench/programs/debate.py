"""A three-role debate written as an ordinary `openai` program, for bench/program_vs_team.py.

Two debaters answer the question, each then sees the other's answer and may revise, and a judge
reads both final answers and gives the answer: 5 calls a run, the last on its own. It knows
nothing of masrl; the model names `debater_a`, `debater_b` and `judge` are routed by the config's
`system.trained`. Deterministic given its model replies (no randomness of its own).

With DEBATE_CLIENT=urllib it makes the same requests with the standard library instead of the
`openai` client, which takes seconds of CPU to import: the same program without most of a
process's start-up cost.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request

ANSWER = "Compute the result. Reply with the final answer as <answer>NUMBER</answer> and nothing else."
REVISE = "Another solver answered: {other}\nCheck both answers and reply with <answer>NUMBER</answer>."
JUDGE = "Two solvers answered a problem. Reply with the correct final answer as <answer>NUMBER</answer>."


def ask(client, model: str, messages: list[dict]) -> str:
    if client is None:  # DEBATE_CLIENT=urllib
        body = json.dumps({"model": model, "messages": messages}).encode()
        request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", body, {
            "Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
        with urllib.request.urlopen(request) as reply:
            return json.load(reply)["choices"][0]["message"]["content"] or ""
    reply = client.chat.completions.create(model=model, messages=messages)
    return reply.choices[0].message.content or ""


def main() -> None:
    task = json.loads(sys.stdin.readline())
    client = None
    if os.environ.get("DEBATE_CLIENT") != "urllib":
        from openai import OpenAI

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
