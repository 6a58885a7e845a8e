"""A debate with one LoRA per role, written with the plain `openai` client and knowing nothing of masrl.

Two debaters answer, each revises after reading the other's answer, and a judge picks one (5 calls).
The debaters are asked at the same time (two threads): masrl's gateway puts calls a program makes
together into one generation when one adapter answers them (`system.trained` mapping both debaters
to one name), so each round of the debate then waits for one generation, not two.
The program's answer is the picked debater's answer, not the judge's reply ("A" or "B"): that is what
training scores and what `masrl serve` answers. Its last line also reports a reward per role (a format
check it can make without the gold answer: did each debater end with an <answer> tag, did the judge
name exactly one letter), which masrl adds to each of that role's calls as its local reward.

The three model names below are the program's own. masrl's config maps each to a LoRA adapter of its
own (`system.trained: {debater_a: debater_a, debater_b: debater_b, judge: judge}`); against any other
OpenAI-compatible server they are whatever models that server has by these names. Run it by hand:

    echo '{"id": "1", "question": "Calculate 2 + 3."}' | python debate.py
"""

from __future__ import annotations

import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor

DEBATER = "Solve the problem. End with your final answer as <answer>NUMBER</answer>."
REVISE = "Another debater answered:\n{other}\nCheck both answers and end with your final <answer>NUMBER</answer>."
JUDGE = "Problem: {question}\nDebater A: {a}\nDebater B: {b}\nWhich debater is right? Reply with one letter, A or B."


def ask(client, model: str, messages: list[dict]) -> str:
    reply = client.chat.completions.create(model=model, messages=messages)
    return reply.choices[0].message.content or ""


def argue(client, model: str, question: str) -> tuple[list[dict], str]:
    messages = [{"role": "system", "content": DEBATER}, {"role": "user", "content": question}]
    return messages, ask(client, model, messages)


def revise(client, model: str, messages: list[dict], mine: str, other: str) -> str:
    more = [{"role": "assistant", "content": mine}, {"role": "user", "content": REVISE.format(other=other)}]
    return ask(client, model, messages + more)


def has_answer(text: str) -> bool:
    return re.search(r"<answer>\s*-?[\d.,/]+\s*</answer>", text) is not None


def verdict(text: str) -> str | None:
    """The letter the judge named, when it named exactly one."""
    letters = set(re.findall(r"\b([AB])\b", text))
    return letters.pop() if len(letters) == 1 else None


def main() -> None:
    from openai import OpenAI

    task = json.loads(sys.stdin.readline())
    client = OpenAI(max_retries=0)  # OPENAI_BASE_URL and OPENAI_API_KEY: masrl's gateway during training
    question = task["question"]
    debaters = ("debater_a", "debater_b")
    with ThreadPoolExecutor(2) as both:  # both debaters at once (the client is safe to share between threads)
        (messages_a, a), (messages_b, b) = both.map(argue, (client, client), debaters, (question, question))
        a, b = both.map(revise, (client, client), debaters, (messages_a, messages_b), (a, b), (b, a))
    pick = verdict(ask(client, "judge", [{"role": "user", "content": JUDGE.format(question=question, a=a, b=b)}]))
    rewards = {"debater_a": float(has_answer(a)), "debater_b": float(has_answer(b)), "judge": float(pick is not None)}
    print(json.dumps({"answer": b if pick == "B" else a, "rewards": rewards}))


if __name__ == "__main__":
    main()
