"""Where specs run: `inprocess` (one after another in this process, for `dlbench run`),
`isolated` (one spec in its own process, for suites), `torchrun` (one process per GPU),
`suiterun` (a whole suite, resumable), `slurm` (one SLURM job per spec through submitit)."""
