"""Optional parts that ship with Teleo but are off by default: each module is a plugin, enabled by
naming it in the ``plugins`` setting (``TELEO_PLUGINS``), which loads it in the server and in
Triton's ``teleo_embed`` model alike."""

__all__: list[str] = []
