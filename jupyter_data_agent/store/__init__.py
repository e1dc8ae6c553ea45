"""What the product keeps between sessions: the decisions store and the trained value models.

Neutral ground for the server (which writes decisions and picks the newest
value model) and ``train/`` (which reads the one and writes the other).
"""
