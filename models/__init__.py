"""Models in the loop: prompting an OpenAI-compatible endpoint, multi-turn refinement, imports.

This layer sits above the engine and the store (it writes samples and
evaluations); nothing below it imports it.
"""
