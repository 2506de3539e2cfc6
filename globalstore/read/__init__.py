"""The read side every face shares: protocols, queries, Arrow."""
