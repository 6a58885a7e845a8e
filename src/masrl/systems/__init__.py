"""Systems: who acts next and how the state changes; each paper's system is one package here.

Each system declares itself with one `SystemSpec` (masrl.systems.api). This package's own module
holds only the table of built-in names; `masrl.registry.resolve_system(kind)` finds the spec a
config's `system.kind` names: a built-in name below, a dotted path `package.module:OBJECT`, or an
entry point in the group `masrl.systems` of an installed package.
"""

from __future__ import annotations

# kind -> "module:object"
BUILTIN: dict[str, str] = {
    "single": "masrl.systems.single:SYSTEM",
    "team": "masrl.systems.team:SYSTEM",
    "chain": "masrl.systems.chain:SYSTEM",
    "router": "masrl.systems.router:SYSTEM",
    "budget": "masrl.systems.budget:SYSTEM",
    "search": "masrl.systems.search:SYSTEM",
    "turns": "masrl.systems.turns:SYSTEM",
    "puppeteer": "masrl.systems.puppeteer:SYSTEM",
    "program": "masrl.systems.program:SYSTEM",
}
