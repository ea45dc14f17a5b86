"""The normalisations: single-pass norms over the tiled reduction, the row softmax."""
