"""The serving engine that runs hastune's deployment configs (under construction)."""
