"""The pure core: block kinds, the projection and what derives from it. No Django here."""
