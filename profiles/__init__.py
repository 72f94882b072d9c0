"""TOSA 1.0 profiles, extensions and levels; requirements and ERROR_IF validation of graphs."""
