"""rules adapter."""
