"""One module per command; shared click options live in :mod:`.options`."""
