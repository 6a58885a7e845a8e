"""A test program whose answer is not its last call's text: a `solver` answers, a `judge` looks at it,
and the program prints "picked: " and the solver's reply (a judge that picks an answer, as a debate's
does). argv[1] says which `rewards` its last line reports: none, roles ({"judge": 1, "solver": 0}),
misspelt ({"jduge": 1}: no such model) or nan ({"judge": NaN})."""

import json
import sys

from openai import OpenAI

mode = sys.argv[1] if len(sys.argv) > 1 else "none"
task = json.loads(sys.stdin.readline())
client = OpenAI(max_retries=0)


def ask(model: str, content: str) -> str:
    reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": content}])
    return reply.choices[0].message.content or ""


draft = ask("solver", task["question"])
ask("judge", f"Is this right? {draft}")
rewards = {"none": None, "roles": {"judge": 1.0, "solver": 0.0}, "misspelt": {"jduge": 1.0},
           "nan": {"judge": float("nan")}}[mode]  # fmt: skip
print(json.dumps({"answer": f"picked: {draft}", **({"rewards": rewards} if rewards is not None else {})}))
