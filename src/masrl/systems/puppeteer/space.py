"""The agent space: base model x reasoning pattern x tool, plus a terminator
(Puppeteer (arXiv:2505.19591), section 2 "a = (m, r, t)" and appendix B, table 2).

An agent of the space is named `model:pattern` (no tool) or `model:pattern:tool`.
Its prompt is the pattern's role and action text (our own wording, after the
paper's figures 13-16); a tool agent is additionally asked to write the tool's
parameter in a tag, and after the model answers the tool runs on that
parameter and its output is appended to the agent's output (the paper's tool
prompts "determine the parameters required for invoking external tools").

Tools:
- `python`: the code in <code>...</code> (or a ``` block) runs in masrl.sandbox
  (time and memory limits, no network, a throwaway directory);
- `read_file`: <file>NAME</file> is read from one allowed folder (no path may
  leave it);
- `search`: <query>...</query> is looked up in a BM25 index (masrl.retrieval)
  over the allowed folder's text files.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from masrl.systems.api import Agent, BM25Index, CorpusPage, Message, Reply, approx_tokens, run_code

TERMINATOR = "terminator"

# Our own prompt texts, one per reasoning pattern (appendix B, figures 13, 15, 16).
PATTERNS: dict[str, str] = {
    "planning": "You plan. Break the problem into a short list of steps and say which step comes next.",
    "reasoning": "You reason. Continue from the work so far, carry out the next steps and compute the result.",
    "critique": "You critique. Check the work so far for mistakes, say what is wrong or confirm it, then give "
    "the answer you believe is right.",
    "reflect": "You reflect. Look back over the whole attempt, say why it may have gone wrong and what to do "
    "differently, then give your best answer.",
    "question": "You ask. Pose the next sub-question the work so far leaves open and answer it.",
    "summarize": "You summarise. State briefly what the work so far has established and the answer it points to.",
    "conclude": "You conclude. Read the work so far and state the final answer.",
    "modify": "You correct. Find the error in the work so far, fix it and give the corrected answer.",
}
ANSWER_RULE = "End with the final answer as <answer>ANSWER</answer>."

TOOL_PROMPTS: dict[str, str] = {
    "python": "You may run Python: write a short program that prints the result inside <code>...</code>.",
    "read_file": "You may read one reference file: write its name inside <file>...</file>. Files: {files}.",
    "search": "You may search the reference notes: write a few keywords inside <query>...</query>.",
}
TOOLS = ("none", *TOOL_PROMPTS)


@dataclass(frozen=True)
class AgentSpec:
    model: str
    pattern: str
    tool: str = "none"

    def __post_init__(self):
        if self.pattern not in PATTERNS:
            raise ValueError(f"unknown reasoning pattern {self.pattern!r}; known: {', '.join(PATTERNS)}")
        if self.tool not in TOOLS:
            raise ValueError(f"unknown tool {self.tool!r}; known: {', '.join(TOOLS)}")

    @property
    def name(self) -> str:
        return f"{self.model}:{self.pattern}" + ("" if self.tool == "none" else f":{self.tool}")

    def system_prompt(self, files: Sequence[str] = ()) -> str:
        parts = [PATTERNS[self.pattern]]
        if self.tool != "none":
            parts.append(TOOL_PROMPTS[self.tool].format(files=", ".join(files) or "none"))
        parts.append(ANSWER_RULE)
        return " ".join(parts)


def agent_space(models: Sequence[str], patterns: Sequence[str], tools: Sequence[str]) -> list[AgentSpec]:
    """Every (model, pattern, tool) combination, models outermost."""
    for name, given, known in (("patterns", patterns, PATTERNS), ("tools", tools, TOOLS)):
        unknown = [x for x in given if x not in known]
        if unknown:
            raise ValueError(f"unknown {name} {unknown}; known: {', '.join(known)}")
    if not models or not patterns or not tools:
        raise ValueError("the agent space needs at least one model, one pattern and one tool ('none' for no tool)")
    return [AgentSpec(m, p, t) for m in models for p in patterns for t in tools]


# ---------------------------------------------------------------- tools
class Tool(Protocol):
    def __call__(self, parameter: str) -> str: ...


_TAG = {"python": "code", "read_file": "file", "search": "query"}
_FENCE = re.compile(r"```(?:python|py)?\s*\n?(.*?)```", re.DOTALL)


def tool_parameter(tool: str, text: str) -> str | None:
    """The parameter a model wrote for `tool`: the tag's content (python: also a ``` block)."""
    m = re.search(rf"<{_TAG[tool]}>(.*?)(?:</{_TAG[tool]}>|$)", text, re.DOTALL | re.IGNORECASE)
    if m and m.group(1).strip():
        return m.group(1).strip()
    if tool == "python":
        f = _FENCE.search(text)
        if f and f.group(1).strip():
            return f.group(1).strip()
    return None


@dataclass(frozen=True)
class PythonTool:
    timeout: float = 5.0
    max_chars: int = 600

    def __call__(self, parameter: str) -> str:
        # SandboxError (no isolation here, or a broken sandbox) propagates: a run whose tool
        # silently answers "unavailable" trains on a different task than the one configured.
        res = run_code(parameter, timeout=self.timeout, cpu_seconds=self.timeout, memory_mb=256)
        out = res.stdout if res.status == "ok" else f"{res.status}: {res.stderr.strip()[-300:]}"
        return out.strip()[: self.max_chars] or "(no output)"


@dataclass(frozen=True)
class FileTool:
    root: Path
    max_chars: int = 1200

    def __call__(self, parameter: str) -> str:
        root = self.root.resolve()
        path = (root / parameter.strip().strip("\"'")).resolve()
        if not path.is_relative_to(root) or path == root:
            return f"refused: {parameter.strip()[:60]!r} is outside the allowed folder"
        if not path.is_file():
            return f"no such file: {parameter.strip()[:60]!r}; files: {', '.join(list_files(root))}"
        return path.read_text(errors="replace")[: self.max_chars]


class SearchTool:
    def __init__(self, root: Path, k: int = 2, max_chars: int = 400):
        pages = [
            CorpusPage(id=name, title=name, text=(root / name).read_text(errors="replace")) for name in list_files(root)
        ]
        if not pages:
            raise ValueError(f"the search tool needs text files in {root}")
        self.by_id = {p.id: p for p in pages}
        self.index = BM25Index(pages)
        self.k, self.max_chars = k, max_chars

    def __call__(self, parameter: str) -> str:
        hits = self.index.search(parameter, self.k)
        if not hits:
            return "no matching notes"
        return "\n".join(f"[{pid}] {self.by_id[pid].text[: self.max_chars]}" for pid, _ in hits)


def resolve_folder(folder: str | Path) -> Path:
    """`folder` as given, or, when it does not exist and is relative, inside masrl/systems (the
    shipped configs name `puppeteer/notes`, a few math notes packaged with this system)."""
    path = Path(folder).expanduser()
    if path.is_dir() or path.is_absolute():
        return path
    packaged = Path(__file__).resolve().parents[1] / path
    return packaged if packaged.is_dir() else path


def list_files(root: Path) -> list[str]:
    """Names of the text files directly inside `root`, sorted."""
    return sorted(p.name for p in Path(root).iterdir() if p.is_file() and p.suffix in (".txt", ".md"))


def build_tools(tools: Sequence[str], folder: str | Path | None) -> dict[str, Tool]:
    needs_folder = [t for t in tools if t in ("read_file", "search")]
    if needs_folder and not folder:
        raise ValueError(f"tools {needs_folder} need puppeteer.folder (the folder they may read)")
    out: dict[str, Tool] = {}
    folder = resolve_folder(folder) if folder else None
    if "python" in tools:
        out["python"] = PythonTool()
    if "read_file" in tools:
        out["read_file"] = FileTool(Path(folder))
    if "search" in tools:
        out["search"] = SearchTool(Path(folder))
    return out


# ---------------------------------------------------------------- agents
class SpaceAgent:
    """One agent of the space: a model backend, and after it the agent's tool (if any)."""

    def __init__(self, spec: AgentSpec, model: Agent, tool: Tool | None = None):
        self.name = spec.name
        self.spec = spec
        self.model = model
        self.tool = tool

    async def __call__(self, messages: Sequence[Message]) -> Reply:
        reply = await self.model(messages)
        if self.tool is None:
            return reply
        param = tool_parameter(self.spec.tool, reply.text)
        if param is None:
            result = f"no {_TAG[self.spec.tool]} given, the tool did not run"
        else:
            result = await asyncio.to_thread(self.tool, param)
        # The tool's output is read by later agents: it is input to them, not tokens this agent generated.
        text = f"{reply.text}\n[{self.spec.tool} output]\n{result}"
        return replace(reply, text=text, tokens_in=reply.tokens_in + approx_tokens(result))


def space_agents(
    specs: Sequence[AgentSpec], models: Mapping[str, Agent], tools: Mapping[str, Tool]
) -> dict[str, Agent]:
    missing = sorted({s.model for s in specs} - set(models))
    if missing:
        raise ValueError(f"agent space names models that were not built: {missing}")
    return {s.name: SpaceAgent(s, models[s.model], tools.get(s.tool)) for s in specs}
