"""What operators do to many runs at once, shared by the API and the CLI."""
