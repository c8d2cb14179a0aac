"""The stages that judge one candidate: extract, assemble, inspect (anywhere), run and time (GPU)."""

# Bumped whenever a change could alter a verdict; every evaluation row records it.
ENGINE_VERSION = "0.7.1"
