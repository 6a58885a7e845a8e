"""A LangGraph program that knows nothing of masrl: a planner writes a plan, a solver answers from it,
and a reviewer may send the answer back to the solver once.

The graph is ordinary LangGraph (`StateGraph`, a conditional edge); each node talks to its model
with the official `openai` client through OPENAI_BASE_URL / OPENAI_API_KEY. It reads one task as
JSON on stdin and prints {"answer": ...} last. masrl trains it unchanged (config.yaml):

    echo '{"id": "1", "question": "Calculate 2 + 3."}' | python graph.py
"""

from __future__ import annotations

import json
import re
import sys
from typing import TypedDict

PLANNER = "Write a one-line plan for computing the result. Do not compute it."
SOLVER = "Follow the plan. Reply with the final answer as <answer>NUMBER</answer> and nothing else."
REVIEWER = "Is the answer right? Reply <verdict>accept</verdict> or <verdict>revise</verdict>."


class State(TypedDict, total=False):
    question: str
    plan: str
    answer: str
    reviews: int
    verdict: str


def build_graph(client):
    from langgraph.graph import END, START, StateGraph

    def ask(model: str, system: str, user: str) -> str:
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "system", "content": system}, {"role": "user", "content": user}]
        )
        return reply.choices[0].message.content or ""

    def plan(state: State) -> State:
        return {"plan": ask("planner", PLANNER, state["question"])}

    def solve(state: State) -> State:
        note = "\nA reviewer rejected the previous answer: " + state["answer"] if state.get("answer") else ""
        return {"answer": ask("solver", SOLVER, f"{state['question']}\nPlan: {state['plan']}{note}")}

    def review(state: State) -> State:
        verdict = ask("reviewer", REVIEWER, f"Problem: {state['question']}\nAnswer: {state['answer']}")
        return {"verdict": verdict, "reviews": state.get("reviews", 0) + 1}

    def route(state: State) -> str:
        found = re.search(r"<verdict>\s*(\w+)", state["verdict"])
        revise = bool(found) and found.group(1).lower() == "revise"
        return "solve" if revise and state["reviews"] < 2 else END

    graph = StateGraph(State)
    graph.add_node("plan", plan)
    graph.add_node("solve", solve)
    graph.add_node("review", review)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "solve")
    graph.add_edge("solve", "review")
    graph.add_conditional_edges("review", route, ["solve", END])
    return graph.compile()


def main() -> None:
    from openai import OpenAI

    task = json.loads(sys.stdin.readline())
    final = build_graph(OpenAI(max_retries=0)).invoke({"question": task["question"], "reviews": 0})
    print(json.dumps({"answer": final["answer"]}))


if __name__ == "__main__":
    main()
