"""The evolving orchestrator's parts (puppeteer-orchestration.txt): the agent space
(space), cost-aware returns (returns), majority vote (vote), the scoring-head policy
(head), orchestration topology (topology) and evaluation. The system itself is
masrl.systems.puppeteer."""
