"""``python -m teleo_server.cli``: the same as the ``teleo`` command."""

from teleo_server.cli import main

if __name__ == "__main__":
    raise SystemExit(main())


__all__: list[str] = []
