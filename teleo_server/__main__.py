"""``python -m teleo_server``: run the server (same as ``teleo serve``)."""

from teleo_server.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["serve", *__import__("sys").argv[1:]]))
