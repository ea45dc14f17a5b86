"""Emitters the recipes share: the ModelNew file around the kernels (`model_file.py`), one Triton expression
per op (`triton_math.py`) and fused elementwise regions with their kernel and launcher
(`fused_elementwise.py`)."""
