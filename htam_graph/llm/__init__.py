"""llm adapter."""
