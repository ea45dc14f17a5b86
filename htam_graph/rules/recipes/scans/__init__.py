"""The scans: cumulative sum / product in chunks with a carried prefix."""
