"""A test program that fails the way argv[1] says: crash, hang, nojson, flood, unknown, badreward,
halfcrash (crash on tasks whose id ends in an odd digit, else answer), or ok (answer)."""

import json
import os
import subprocess
import sys
import time

mode = sys.argv[1]
task = json.loads(sys.stdin.readline())
if mode == "halfcrash":
    mode = "crash" if int(task["id"][-1]) % 2 else "ok"
if mode == "crash":
    print("half a line", flush=True)
    sys.exit("boom: the program fell over")
if mode == "hang":
    child = subprocess.Popen(["sleep", "60"])
    with open(os.environ["PID_FILE"], "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    time.sleep(60)
if mode == "nojson":
    print("the answer is 4")
    sys.exit(0)
if mode == "flood":
    sys.stdout.write("x" * (1 << 22))
    sys.exit(0)
if mode == "badreward":
    print(json.dumps({"answer": "4", "reward": "lots"}))
    sys.exit(0)

from openai import OpenAI  # noqa: E402

client = OpenAI(max_retries=0)
model = "gpt-4o" if mode == "unknown" else "solver"
reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": task["question"]}])
print(json.dumps({"answer": reply.choices[0].message.content}))
