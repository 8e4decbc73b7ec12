"""The optimizing agent: LLM client, prompts, search memory, MCTS/greedy search, policies, code search.

Data flows policy -> candidate file -> Evaluator -> outcome -> reward -> tree (saved in the run store).
Modules import heavy dependencies (openai, torch) inside functions so the LLM-free path needs neither.
"""
