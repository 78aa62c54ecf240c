"""Typed stack configuration: one pydantic model per section, validated before any resource exists."""

from config.settings import PROJECT, ConfigError, Settings, load_settings

__all__ = ["PROJECT", "ConfigError", "Settings", "load_settings"]
