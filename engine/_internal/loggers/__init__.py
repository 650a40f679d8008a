"""Built-in logger callbacks (public names: ``engine.callbacks``)."""
