"""Every command the README and the docs show still runs as written (nothing is trained here).

The pages are README.md, docs/*.md and bench/README.md. A command is a line of a fenced block
(```bash, ```sh, or a plain ``` block, where only lines that start with a command this test knows,
or with `$ `, count) or an inline code span that starts with `masrl`, `python` or `.venv/bin/`.
Continuation lines (`\\`) are joined, comments dropped, `&&` / `;` split a line into commands, and
shell variables set earlier in the same block (`T="..."`, `export P=...`) are expanded.

What is checked, per command:
- `masrl ...` (also `.venv/bin/masrl`, `python -m masrl.cli`, `torchrun ... -m masrl.cli`): masrl's
  own argument parser (`masrl.cli.parser.build_parser` through `parse`, system commands included) accepts it; for `train` and
  for `eval` of a config, the config and its overrides load and validate
  (`masrl.loading.load_config`, the code `masrl train` runs before any model loads). A transcript
  block (`$ masrl ...` followed by its output) that shows `config error` must fail with one.
  A config input under `runs/` that an earlier command makes (`runs/champ-pool.jsonl`) may be absent.
- `python scripts/X.py`, `python bench/X.py`, `pytest tests/...`, `bash scripts/X.sh`: the file exists.
- `python -m MODULE`: the module can be found; `python -c CODE`: it compiles, its masrl imports resolve.

Placeholders, by one rule: a word written in capitals (RUN_DIR, RUN, N, HOST0, KEY, QUESTION, ...),
`<name>`, `...` or `my.yaml` stands for the reader's own value; `[...]` is an optional part of a usage
line and is left out. A command with a placeholder is still parsed (unless the
placeholder stands where the parser wants a number), but its config is loaded only when the
placeholder is not in the config or its overrides. A `masrl
train --resume RUN_DIR` or `masrl eval RUN_DIR` names a run directory, so only its parsing is
checked. An inline span that is just `masrl COMMAND` (or `masrl COMMAND --option`) names the command:
the command (and the option) must exist.

Also: every relative link of these pages points at a file that exists; every docs page is linked
from the README; docs/config.md lists every key of the engine's config sections.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from masrl.cli import _COMMANDS, _split_config
from masrl.cli.parser import build_parser, parse
from masrl.config import PACKAGED, Config, ConfigError
from masrl.loading import load_config

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
PLACEHOLDER = re.compile(r"(?<![\w.$-])(?:[A-Z][A-Z0-9_]*|my\.yaml)(?![\w.-]*[a-z])|<\w+>|^\.\.\.$")
STARTS = ("masrl", ".venv/bin/", "python", "pytest", "torchrun", "/usr/bin/time", "bash", "$ ")


@dataclass(frozen=True)
class Command:
    where: str  # page:line
    text: str
    expect_error: bool = False

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"


def _blocks(text: str):
    """(first line number, language, body) of each fenced block, and the text outside them."""
    outside, blocks, lines = [], [], text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*```(\w*)\s*$", lines[i])
        if not m:
            outside.append(lines[i])
            i += 1
            continue
        start, body = i + 2, []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        blocks.append((start, m.group(1), body))
        outside += [""] * (len(body) + 2)  # the block's lines, so that line numbers stay right
        i += 1
    return blocks, "\n".join(outside)


def _expand(line: str, variables: dict[str, str]) -> str | None:
    """Shell variables of the block expanded; None when one is not known here."""
    unknown = False

    def sub(m):
        nonlocal unknown
        name = m.group(1) or m.group(2)
        if name not in variables:
            unknown = True
            return m.group(0)
        return variables[name]

    out = re.sub(r"\$\{(\w+)\}|\$(\w+)", sub, line)
    return None if unknown else out


def _split(line: str) -> list[str]:
    """The commands of a shell line: split at `&&` and `;` outside quotes."""
    parts, quote, current, i = [], None, "", 0
    while i < len(line):
        ch = line[i]
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == ";" or line.startswith("&&", i):
            parts.append(current)
            current, i = "", i + (2 if ch == "&" else 1)
            continue
        current += ch
        i += 1
    return [*parts, current]


def _block_commands(page: str, start: int, lang: str, body: list[str]) -> list[Command]:
    if lang not in ("", "bash", "sh", "shell", "console"):
        return []
    transcript = any(line.startswith("$ ") for line in body)
    expect_error = transcript and any("config error" in line for line in body)
    variables: dict[str, str] = {}
    out, i = [], 0
    while i < len(body):
        number, line = start + i, body[i]
        while line.rstrip().endswith("\\") and i + 1 < len(body):
            i += 1
            line = line.rstrip()[:-1] + " " + body[i].strip()
        i += 1
        line = line.strip()
        if transcript:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        elif lang == "" and not line.startswith(STARTS):
            continue
        assign = re.match(r"^(?:export\s+)?(\w+)=(.*)$", line)
        if assign and len(shlex.split(assign.group(2), comments=True)) == 1:  # VAR=value or VAR="a b c"
            value = _expand(shlex.split(assign.group(2), comments=True)[0], variables)
            if value is not None:
                variables[assign.group(1)] = value
            continue
        line = _expand(line, variables)
        if line is None:
            continue
        for part in _split(line):
            if part.strip():
                out.append(Command(f"{page}:{number}", part.strip(), expect_error=expect_error))
    return out


def _inline_commands(page: str, text: str) -> list[Command]:
    out = []
    for m in re.finditer(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)?)`(?!`)", text):
        span = " ".join(m.group(1).split())
        if re.match(r"^(?:\w+=\S+\s+)*(?:/usr/bin/time\s+-v\s+)?(?:\.venv/bin/)?(?:masrl|python)\s", span):
            line = text.count("\n", 0, m.start()) + 1
            out.append(Command(f"{page}:{line}", span))
    return out


def collect() -> list[Command]:
    commands = []
    for path in PAGES:
        page = str(path.relative_to(ROOT))
        blocks, outside = _blocks(path.read_text())
        for start, lang, body in blocks:
            commands += _block_commands(page, start, lang, body)
        commands += _inline_commands(page, outside)
    return [c for c in commands if _kind(c) is not None]


def _words(command: Command) -> tuple[list[str], dict[str, str]]:
    """The command's words without leading `VAR=value`s and wrappers, and those variables."""
    try:
        words = shlex.split(command.text, comments=True)
    except ValueError:  # unbalanced quotes: the test of this command says so
        return [], {}
    env = {}
    while words and re.match(r"^\w+=", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    while words and words[0] in ("/usr/bin/time", "-v", "time"):
        words.pop(0)
    kept, optional = [], False  # `[--reps 3]`: an optional part of a usage line, left out
    for w in words:
        optional = optional or w.startswith("[")
        if not optional:
            kept.append(w)
        if optional and w.endswith("]"):
            optional = False
    return kept, env


def _kind(command: Command) -> str | None:
    words, _ = _words(command)
    if not words:
        return "unbalanced" if re.match(r"^(?:\S+=\S+\s+)*(?:\.venv/bin/)?(?:masrl|python)\b", command.text) else None
    head = words[0]
    if head.endswith("masrl") or "masrl.cli" in words:
        return "masrl"
    if head.endswith("pytest") or words[1:3] == ["-m", "pytest"]:
        return "pytest"
    if re.search(r"(^|/)python3?$", head):
        return "python"
    if head == "bash" and len(words) > 1 and words[1].endswith(".sh"):
        return "bash"
    return None


def _commands() -> dict[str, argparse.ArgumentParser]:
    """masrl's commands (system commands included) and their parsers."""
    actions = [a for a in build_parser(_COMMANDS)._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices)


def _masrl_argv(words: list[str]) -> list[str]:
    if "masrl.cli" in words:
        return words[words.index("masrl.cli") + 1:]
    return words[1:]


COMMANDS = collect()


def test_the_pages_have_commands():
    # The README's first command is the main job; the docs show many more (a sanity floor, not a count).
    first = [" ".join(_words(c)[0]) for c in COMMANDS if c.where in ("README.md:4", "README.md:5")]
    assert first == ["bash scripts/setup.sh", ".venv/bin/masrl train", "bash scripts/setup.sh",
                     ".venv/bin/python -m pytest"]
    assert len(COMMANDS) > 100


def _placeholders(words: list[str]) -> list[str]:
    return [w for w in words if PLACEHOLDER.search(w)]


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_the_command_runs_as_written(command, monkeypatch):
    words, env = _words(command)
    kind = _kind(command)
    assert kind != "unbalanced", f"{command}: its quotes do not close"
    if kind == "pytest":  # the whole suite, or the test files it names
        paths = [w.split("::")[0] for w in words if w.startswith("tests/")]
        assert all((ROOT / p).exists() for p in paths if not PLACEHOLDER.search(p)), f"{command}: no such test file"
        return
    if kind == "bash":
        assert (ROOT / words[1]).exists(), f"{command}: {words[1]} does not exist"
        return
    if kind == "python":
        if "-c" in words:
            code = words[words.index("-c") + 1]
            compile(code, command.where, "exec")
            for module, names in re.findall(r"from (masrl[\w.]*) import ([\w, ]+)", code):
                imported = importlib.import_module(module)
                for name in names.replace(" ", "").split(","):
                    assert hasattr(imported, name), f"{command}: {module} has no {name}"
            return
        if "-m" in words:
            module = words[words.index("-m") + 1]
            assert importlib.util.find_spec(module) is not None, f"{command}: no module {module}"
            return
        script = next((w for w in words[1:] if w.endswith(".py")), None)
        assert script is not None, f"{command}: names no script"
        if PLACEHOLDER.fullmatch(script):
            return
        assert (ROOT / script).exists(), f"{command}: {script} does not exist"
        return
    argv = _masrl_argv(words)
    try:
        args = parse(build_parser(_COMMANDS), argv)  # as `masrl` parses: overrides may follow the options
    except SystemExit as stop:
        if argv in (["--help"], ["-h"]):
            assert stop.code == 0, f"{command}: the help exits {stop.code}"
            return
        if argv and all(a.startswith("--") for a in argv[1:]):  # `masrl COMMAND [--option]` named in prose
            assert argv[0] in _commands(), f"{command}: no such command"
            options = _commands()[argv[0]]._option_string_actions
            assert all(a in options for a in argv[1:]), f"{command}: no such option"
            return
        if _placeholders(argv):
            return  # a placeholder where the parser wants a number (`--seeds N`)
        raise AssertionError(f"{command}: masrl's parser refuses it") from None
    for path in env.get("PYTHONPATH", "").split(":"):
        if path:
            monkeypatch.syspath_prepend(str(ROOT / path))
    if args.command == "train" and args.resume is None:
        config, overrides = _split_config(args.config, args.overrides)
    elif args.command == "eval":
        config, overrides = _split_config(args.target, args.overrides)
        if config is not None and not config.endswith(".yaml") and not (PACKAGED / f"{config}.yaml").exists():
            return  # a run directory: evaluated with its saved config
    else:
        return
    if _placeholders([config or "", *overrides]):
        return
    if any(o.startswith("rollout.workers=") and o != "rollout.workers=0" for o in overrides) and (
        importlib.util.find_spec("ray") is None
    ):
        pytest.skip("needs Ray (the scale extra)")
    monkeypatch.chdir(ROOT)  # paths in the docs are relative to the repository root
    if command.expect_error:
        with pytest.raises(ConfigError):
            load_config(config, overrides)
        return
    try:
        load_config(config, overrides)
    except ConfigError as exc:  # an input that an earlier command makes under runs/ is not there yet: fine
        problems = str(exc).split(": ", 1)[1].split("; ")
        if not all(re.fullmatch(r"\S+: file runs/\S+ does not exist", p) for p in problems):
            raise


def _links(path: Path) -> list[str]:
    _, outside = _blocks(path.read_text())
    return [m for m in re.findall(r"\]\(([^)\s]+)\)", outside) if not re.match(r"^[a-z]+:|^#", m)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    targets = [(link, (page.parent / link.split("#")[0]).resolve()) for link in _links(page)]
    dead = [link for link, target in targets if not target.exists()]
    assert not dead, f"{page.relative_to(ROOT)} links to missing files: {dead}"


def test_the_readme_links_every_docs_page():
    linked = {(ROOT / link.split("#")[0]).resolve() for link in _links(ROOT / "README.md")}
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p.resolve() not in linked]
    assert not missing, f"README.md does not link {missing}"


def test_the_config_reference_lists_every_engine_key():
    page = (ROOT / "docs" / "config.md").read_text()
    keys = [f"{name}.{key}" for name, field in Config.model_fields.items() for key in field.annotation.model_fields]
    missing = [k for k in keys if f"`{k}`" not in page]
    assert not missing, f"docs/config.md lacks {missing}"


if __name__ == "__main__":  # list what the test checks: python tests/test_docs_commands.py
    for c in COMMANDS:
        print(c, file=sys.stdout)
