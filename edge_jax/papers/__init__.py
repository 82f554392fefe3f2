"""Each paper's application code, one folder per paper."""
