"""The max / avg pooling with the elementwise ops around it in one kernel."""
