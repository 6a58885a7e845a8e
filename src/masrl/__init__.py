"""masrl: build multi-agent LLM systems and train them end to end with RL."""

__version__ = "0.1.0"
