"""Evaluation of the budget-controllable controller (masrl.systems.budget)."""
