"""A test program: one `solver` call asking for token ids and log-probs; it saves what the client
received under $RECORD_DIR and reports a reward of its own (the parity of the reply's bytes), so
about half the runs score 1 and the update has work to do."""

import json
import os
import sys
import uuid

from openai import OpenAI

task = json.loads(sys.stdin.readline())
client = OpenAI(max_retries=0)
reply = client.chat.completions.create(
    model="solver", messages=[{"role": "user", "content": task["question"]}], logprobs=True,
    extra_body={"return_token_ids": True},
)
body = reply.model_dump()
with open(os.path.join(os.environ["RECORD_DIR"], f"{uuid.uuid4().hex}.json"), "w") as f:
    json.dump({"id": body["id"], "prompt_token_ids": body["prompt_token_ids"],
               "token_ids": body["choices"][0]["token_ids"],
               "logprobs": [t["logprob"] for t in body["choices"][0]["logprobs"]["content"]]}, f)
text = reply.choices[0].message.content or ""
print(json.dumps({"answer": text, "reward": sum(text.encode()) % 2}))
