"""Stream operators: what runs inside a task's operator chain."""
