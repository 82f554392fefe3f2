"""Token-indexed memories beside the transformer: MeKi, PLE, Engram."""
