"""Where specs run, and nothing else: `inprocess` (one after another in this process, for
`dlbench run`), `isolated` (one spec in its own process, for suites), `torchrun` (one process
per GPU), `suiterun` (a whole suite's specs, resumable), `slurm` (one SLURM job per spec through
submitit). The commands that call them are in `dlbench.commands`."""
