"""Emitters the recipes share: the ModelNew file around the kernels (`model_file.py`), one Triton expression
per op (`triton_math.py`), fused elementwise regions with their kernel and launcher
(`fused_elementwise.py`) and what the tiled kernels over a conv output share (`conv_epilogue.py`)."""
