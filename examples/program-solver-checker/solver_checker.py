"""A two-agent program that knows nothing of masrl: a solver answers, a checker may send it back once.

It reads one task as JSON on stdin ({"id", "question", ...}), talks to its two models through
the official `openai` client (OPENAI_BASE_URL and OPENAI_API_KEY from the environment) and
prints {"answer": ...} as its last line. Run it against any OpenAI-compatible server:

    echo '{"id": "1", "question": "Calculate 2 + 3."}' | python solver_checker.py

masrl trains it unchanged (config.yaml): `solver` and `checker` are model names masrl routes to
trained policies. With temperature 0 on the server's side and no randomness of its own it is
deterministic given its model replies, which is what replay branching needs.
"""

from __future__ import annotations

import json
import re
import sys

SOLVER = "Compute the result. Reply with the final answer as <answer>NUMBER</answer> and nothing else."
CHECKER = "You check a draft answer. Reply <verdict>accept</verdict> if it is right, else <verdict>revise</verdict>."
RETRY = "A checker thinks this is wrong. Compute it again and reply with <answer>NUMBER</answer>."


def solver_messages(question: str, draft: str | None = None) -> list[dict]:
    messages = [{"role": "system", "content": SOLVER}, {"role": "user", "content": question}]
    if draft is not None:
        messages += [{"role": "assistant", "content": draft}, {"role": "user", "content": RETRY}]
    return messages


def checker_messages(question: str, draft: str) -> list[dict]:
    return [{"role": "system", "content": CHECKER},
            {"role": "user", "content": f"Problem: {question}\nDraft: {draft}"}]  # fmt: skip


def sends_back(verdict: str) -> bool:
    """The checker sends the draft back only when it clearly says so."""
    found = re.search(r"<verdict>\s*(\w+)", verdict)
    return bool(found) and found.group(1).lower() == "revise"


def ask(client, model: str, messages: list[dict]) -> str:
    reply = client.chat.completions.create(model=model, messages=messages)
    return reply.choices[0].message.content or ""


def main() -> None:
    from openai import OpenAI

    task = json.loads(sys.stdin.readline())
    client = OpenAI(max_retries=0)
    question = task["question"]
    draft = ask(client, "solver", solver_messages(question))
    verdict = ask(client, "checker", checker_messages(question, draft))
    if sends_back(verdict):
        draft = ask(client, "solver", solver_messages(question, draft))
    print(json.dumps({"answer": draft}))


if __name__ == "__main__":
    main()
