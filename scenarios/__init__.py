"""Built-in scenario definitions: one TOML file each, installed as ``chaosckpt.scenarios``."""
