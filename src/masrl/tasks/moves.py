"""Reading a list of grid moves (U, D, L, R) out of a model's text, tolerantly.

The grid games (Plan-Path, Sokoban) take an action list such as `[U, R, R, D]`
(AT-GRPO (arXiv:2510.11062), appendix A.2: "the program's output IS the action
list"). A reply may wrap it in prose, quote the symbols, spell them out
("up", "Right") or write them run together ("URRD"). `parse_moves` finds the
list and returns the letters, or None when the text holds no list it can
read: the caller scores that as a format failure, it never raises.

Where to look: after the last line marker `####` if there is one (the
paper's final-answer marker), else the whole text; in that part, the last
`[...]` whose items are all moves, else the last line made only of moves
(optionally after a label such as "Actions:").
"""

from __future__ import annotations

import re

MOVES: dict[str, tuple[int, int]] = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
_WORDS = {"UP": "U", "DOWN": "D", "LEFT": "L", "RIGHT": "R"}
_BRACKETS = re.compile(r"\[([^\[\]]*)\]")
_SPLIT = re.compile(r"[\s,;]+|->|→")
_LABEL = re.compile(r"^\s*[A-Za-z ]{0,30}:\s*")


def final_segment(text: str, marker: str = "####") -> str:
    """The text after the last `marker`, or all of it when there is none."""
    return text.rsplit(marker, 1)[1] if marker in text else text


def _tokens(chunk: str) -> tuple[str, ...] | None:
    """The moves of a comma/space separated chunk, or None if any item is not a move."""
    out: list[str] = []
    for raw in _SPLIT.split(chunk):
        tok = raw.strip().strip("\"'`*.").upper()
        if not tok:
            continue
        if tok in _WORDS:
            out.append(_WORDS[tok])
        elif set(tok) <= set(MOVES):
            out.extend(tok)  # "U" or run together: "URRD"
        else:
            return None
    return tuple(out)


def parse_moves(text: str) -> tuple[str, ...] | None:
    segment = final_segment(text)
    for content in reversed(_BRACKETS.findall(segment)):
        moves = _tokens(content)
        if moves is not None:
            return moves
    for line in reversed(segment.strip().splitlines()):
        moves = _tokens(_LABEL.sub("", line, count=1))
        if moves:  # a blank line is not an answer
            return moves
    return None
