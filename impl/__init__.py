"""Engine adapters: the protocol, the registry, and one adapter per engine kind."""
