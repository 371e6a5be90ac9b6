"""Tiny TF-IDF + EmbeddingBag text classification package."""
