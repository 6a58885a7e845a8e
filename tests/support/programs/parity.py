"""A test program: one `solver` call asking for token ids and log-probs; it saves what the client
received under $RECORD_DIR and reports a reward of its own that always splits a group: the parity of
its arrival among the runs of the same task (claimed with an exclusive file create), so runs
0 and 2 of a group score 0 and runs 1 and 3 score 1, and the update has work to do whatever the
tiny model says. (A reward from the reply's bytes left both groups of a step uniform in about 1 run
in 64, and the test that needs samples failed on it.)"""

import hashlib
import itertools
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
record = os.environ["RECORD_DIR"]
with open(os.path.join(record, f"{uuid.uuid4().hex}.json"), "w") as f:
    json.dump({"id": body["id"], "prompt_token_ids": body["prompt_token_ids"],
               "token_ids": body["choices"][0]["token_ids"],
               "logprobs": [t["logprob"] for t in body["choices"][0]["logprobs"]["content"]]}, f)
task_key = hashlib.sha256(task["id"].encode()).hexdigest()[:16]  # ids are unique; question texts may repeat
for arrival in itertools.count():  # O_EXCL: exactly one run of this task claims each number
    try:
        os.close(os.open(os.path.join(record, f"{task_key}-{arrival}.claim"), os.O_CREAT | os.O_EXCL))
        break
    except FileExistsError:
        continue
text = reply.choices[0].message.content or ""
print(json.dumps({"answer": text, "reward": arrival % 2}))
