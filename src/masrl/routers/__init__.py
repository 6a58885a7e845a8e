"""Routing over an agent pool: the critique-and-routing controller's one-shot baselines and their evaluation."""
