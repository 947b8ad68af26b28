"""The teleological array: every memory embedded in several spaces, each with its own similarity."""

from teleo_server.spaces.base import QueryContext, Space
from teleo_server.spaces.registry import build_spaces, register, space_classes

__all__ = ["QueryContext", "Space", "build_spaces", "register", "space_classes"]
