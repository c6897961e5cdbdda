def animate(*a, **k):
    raise NotImplementedError
