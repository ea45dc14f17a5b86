"""The the tiled reduction kernel (plan, statistics, kernel and launcher) and its dim recipes."""
