"""The conformance suite: every engine, every variant, every flow against the reference."""
