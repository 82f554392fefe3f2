"""``edge-jax hf import|export``: HF checkpoints in as edge_jax workdirs, workdirs out as HF checkpoints."""
