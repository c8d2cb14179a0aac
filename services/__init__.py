"""The service layer: the work the front ends ask for, in one place.

The command line (`cli/`), the explorer (`ptxbench_tui/`) and the scripts (`scripts/`) parse
input and render output; what happens in between — judging a file or a batch of samples,
finding the GPUs, running a model, Fixit's pairs, repairs, explanations and training — is a
function here. A service takes plain values and typed records and returns typed results; it
never prints, never exits and never imports Textual, typer or rich.

| module | job |
|---|---|
| `hardware` | which GPUs this machine has, and what the GPU stages will do for an arch |
| `progress` | the typed events of a batch (the JSON-lines contract of docs/eval-progress.md) |
| `batch` | evaluate a batch of stored samples, one evaluation row each |
| `batch_process` | the batch as a child process followed through its events (the explorer's Live view) |
| `judge` | judge one candidate file: the static stages and, with a GPU, the GPU stages |
| `runs` | model runs against an endpoint, and imports of output made elsewhere |
| `fixit` | Fixit's pairs, export and statistics over the store |
| `fixit_models` | Fixit through a model: repairs and written explanations |
| `fixit_training` | Fixit's tiny checkpoint, LoRA training and re-measurement |
| `errors` | the failures a service reports to its caller (usage, tool, store) |
"""
