"""The orchestrator: workflow definitions, the run and node state machines, and the pure
decider that moves a run from one state to the next."""
