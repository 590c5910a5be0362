"""Device-level pieces shared by the engine and `hastune profile`'s measurements (the lowest
runners layer: no model, no engine; torch is passed in, never imported at module level)."""
