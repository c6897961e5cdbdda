import os

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("VORTONPY_NO_PROGRESS", "1")
