"""Training orchestration: the run state, the evolutionary loop, metrics and the local trainer."""
