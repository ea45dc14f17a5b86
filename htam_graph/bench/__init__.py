"""The bench engine: many (task, policy, seed) runs of the HTAM loop into one resumable folder.

`engine` plans the runs, resumes from `results.jsonl` and keeps the running score; `executors` runs each job
in its own worker process (local pool or Ray) under the task time limit; `job` is one run inside that worker;
`budget` is the shared dollar budget; `resume` reads a cut run back; `runfiles` is the folder of one run (also
written by `htam-graph run --out`). The click command and its printing live in `htam_graph.cli.bench`.
"""
