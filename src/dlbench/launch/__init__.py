"""Where specs run. `inprocess` runs them one after another in this process."""
