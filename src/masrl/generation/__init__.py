"""Every way masrl produces tokens: the engines `rollout.engine` names and the service that batches calls to them.

- `sampling`: what every engine shares: `SamplingParams`, a `Generation`, prompt padding, cutting a row at its end.
- `hf`: HF `generate` through peft, the reference engine (`rollout.engine: hf`), and its batched call.
- `lean`: the lean engine (`rollout.engine: lean`): merged adapter weights, shared prefill, a short sampling loop.
- `forwards`: how the lean loop runs a model (HF's forward, the plain decoder, CUDA graphs).
- `llama`: the plain Llama-family decoder and its preallocated KV cache, which the lean engine runs.
- `engine`: `rollout.engine` in one place: its checks, `auto` resolved, a base's generate for a name.
- `service`: the batched generation service that concurrent agent calls share.
- `remote`: OpenAI-compatible inference servers as an engine (`rollout.engine: openai`).
- `ray`: Ray rollout workers, each running an in-process engine (`rollout.workers`).
- `hf_local`: a frozen local HF model as an agent, served through the service.
"""
