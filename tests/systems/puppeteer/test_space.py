"""Puppeteer's agent space (models x patterns x tools) and its tools: parameters, the folder-bound file tool, search, the sandboxed python tool."""

from __future__ import annotations

import asyncio

import pytest

from masrl.agents.python_fn import FunctionAgent
from masrl.systems.puppeteer.space import (
    AgentSpec,
    FileTool,
    PythonTool,
    SearchTool,
    SpaceAgent,
    agent_space,
    resolve_folder,
    tool_parameter,
)
from masrl.types import Message

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- the space and tools
def test_agent_space_is_the_product():
    space = agent_space(["m1", "m2"], ["reasoning", "critique"], ["none", "python"])
    assert [s.name for s in space][:4] == ["m1:reasoning", "m1:reasoning:python", "m1:critique", "m1:critique:python"]
    assert len(space) == 8
    with pytest.raises(ValueError, match="unknown patterns"):
        agent_space(["m"], ["dance"], ["none"])
    with pytest.raises(ValueError, match="unknown tools"):
        agent_space(["m"], ["reasoning"], ["bing"])
    assert "<code>" in AgentSpec("m", "reasoning", "python").system_prompt()
    assert "a.md, b.md" in AgentSpec("m", "critique", "read_file").system_prompt(["a.md", "b.md"])


def test_tool_parameters():
    assert tool_parameter("python", "try <code>print(1)</code> ok") == "print(1)"
    assert tool_parameter("python", "```python\nprint(2)\n```") == "print(2)"
    assert tool_parameter("read_file", "<file>notes.md</file>") == "notes.md"
    assert tool_parameter("search", "<query>order of operations") == "order of operations"  # unclosed at EOS
    assert tool_parameter("search", "nothing here") is None


def test_file_tool_stays_inside_its_folder(tmp_path):
    (tmp_path / "a.md").write_text("alpha")
    (tmp_path.parent / "secret.txt").write_text("no")
    tool = FileTool(tmp_path)
    assert tool("a.md") == "alpha"
    assert tool("../secret.txt").startswith("refused")
    assert tool("/etc/passwd").startswith("refused")
    assert tool("b.md").startswith("no such file") and "a.md" in tool("b.md")


def test_search_tool_over_the_packaged_notes():
    tool = SearchTool(resolve_folder("puppeteer/notes"))
    assert tool("parentheses multiplication order").startswith("[order-of-operations.md]")


def test_python_tool_runs_in_the_sandbox():
    assert PythonTool()("print(6 * 7)") == "42"
    assert PythonTool(timeout=1.0)("while True: pass").startswith("timeout")


def test_space_agent_runs_its_tool_on_the_models_parameter():
    model = FunctionAgent("m", lambda msgs: "I compute <code>print(3 + 4)</code>")
    agent = SpaceAgent(AgentSpec("m", "reasoning", "python"), model, PythonTool())
    reply = asyncio.run(agent((Message("user", "q"),)))
    assert reply.text.endswith("[python output]\n7")
    plain = asyncio.run(model((Message("user", "q"),)))
    assert reply.tokens_out == plain.tokens_out and reply.tokens_in == plain.tokens_in + 1  # "7" is read later
