"""Two-tier MoE expert cache: simulator, predictors, policies."""
