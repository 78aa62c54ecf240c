"""The test suite (pytest): tests per concern; tests/fakes/ holds what only tests need."""
