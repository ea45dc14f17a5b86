"""store adapter."""
