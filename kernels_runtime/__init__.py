"""The kernel runtime: checks and times candidate kernels, in two processes.

- `parent/`: the caller's process (the loop, `bench`, the CLI). `SubprocessEvaluator` spawns one fresh worker
  per candidate and never runs candidate code; nothing here imports torch.
- `worker/`: the isolated worker process (`python -m htam_graph.kernels_runtime.worker`) that loads the task
  and the candidate, installs the guards, runs the checks and times the calls.
- the modules at this level are pure and imported by both sides: the static verdict (`static_checks`,
  `precheck`), the result recorder, the file-system layout (`paths`), the on-disk reference caches
  (`diskcache`) and the cross-process GPU locks (`gpulock`).
"""
