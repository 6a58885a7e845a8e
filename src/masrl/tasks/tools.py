"""Code that tool agents write: find it in a reply, run it in the sandbox, keep what happened as data.

A tool agent (the paper's Python tool of the math, Sudoku and Plan-Path
workflows, AT-GRPO (arXiv:2510.11062) appendix A.2) answers with one Python code
block whose printed output is its answer. `extract_code` takes the last
fenced block (```python ... ``` or ``` ... ```); `run_tool` runs it through
masrl.sandbox.run_code (time, memory and output limits, no network, a
throwaway directory) and returns a `ToolRun`. A reply without a code block
is not run: `tool_output` then hands the reply itself to the task's parser,
so a tool may also state its answer directly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from masrl.sandbox import run_code

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_OPEN_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*)$", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class ToolRun:
    code: str
    status: str  # masrl.sandbox Status: ok, error, timeout, killed, memory, output_limit
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def extract_code(text: str) -> str | None:
    """The last fenced code block; a block left open at the end of the reply (cut by the
    token limit or a stop string) counts too. None when there is none or it is empty."""
    blocks = _FENCE.findall(text)
    if not blocks:
        tail = _OPEN_FENCE.search(text)
        blocks = [tail.group(1)] if tail else []
    code = blocks[-1].strip() if blocks else ""
    return code or None


def run_tool(code: str, timeout: float = 5.0, memory_mb: int = 512, max_output: int = 16_000) -> ToolRun:
    result = run_code(code, timeout=timeout, cpu_seconds=timeout, memory_mb=memory_mb, max_output=max_output)
    return ToolRun(code, result.status, result.stdout, result.stderr)


def tool_output(text: str, timeout: float = 5.0) -> tuple[str, ToolRun | None]:
    """(the text the task should parse, the run): the program's stdout when the reply holds
    code, else the reply itself."""
    code = extract_code(text)
    if code is None:
        return text, None
    run = run_tool(code, timeout=timeout)
    return run.stdout, run
