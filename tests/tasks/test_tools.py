"""The Python tool of the turn-based tasks: extracting code and running it in the real sandbox."""

from __future__ import annotations

from masrl.tasks.tools import extract_code, tool_output


def test_tool_output_runs_code_in_the_sandbox():
    assert extract_code("text\n```python\nprint(1)\n```\nmore ```py\nprint(2)\n```") == "print(2)"
    assert extract_code("```python\nprint(3)\n") == "print(3)"  # cut before the closing fence
    assert extract_code("no code") is None
    text, run = tool_output("Here:\n```python\nprint(6 * 7)\n```")
    assert text == "42\n" and run.ok and run.code == "print(6 * 7)"
    text, run = tool_output("```python\nraise ValueError('x')\n```")
    assert run.status == "error" and "ValueError" in run.stderr
    assert tool_output("#### 42") == ("#### 42", None)
