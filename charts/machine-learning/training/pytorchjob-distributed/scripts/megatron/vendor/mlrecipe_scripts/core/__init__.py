"""What every framework's scripts share: ``script_core`` (errors, logging, atomic writes, offline defaults) and
``answer_metrics`` (token F1, ROUGE-L)."""
