"""Every touch of Ray outside its public API, in one place."""
