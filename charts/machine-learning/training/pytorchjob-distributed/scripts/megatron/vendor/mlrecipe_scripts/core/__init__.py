"""What every framework's scripts share: ``script_core`` (errors, logging, atomic writes, offline defaults),
``progress`` (the one writer of ``$MLRECIPE_METRICS_FILE`` lines) and ``answer_metrics`` (token F1, ROUGE-L)."""
