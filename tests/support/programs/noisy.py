"""A test program that is not deterministic given its model replies: two `solver` calls, and the
one named by argv[1] (first or second) carries a random number in its prompt."""

import json
import random
import sys

from openai import OpenAI

which = sys.argv[1]
task = json.loads(sys.stdin.readline())
client = OpenAI(max_retries=0)


def ask(text: str, noisy: bool) -> str:
    if noisy:
        text += f" (seed {random.random()})"
    reply = client.chat.completions.create(model="solver", messages=[{"role": "user", "content": text}])
    return reply.choices[0].message.content or ""


first = ask(task["question"], which == "first")
second = ask(f"Check: {first}", which == "second")
print(json.dumps({"answer": second}))
